// Root filesystems a sandbox starts from: the built-in `host` image (this machine's /usr, /bin,
// /lib... bound read-only over a small generated skeleton) and images imported from a root
// filesystem tarball, a `docker save` archive or an OCI image layout archive.
//
// Layout: <state>/images/host/rootfs (the skeleton) and <state>/images/<name>/<tag>/{rootfs,
// image.json} for imported images ('/' in a name is stored as '+').
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/runtime/kernel/mounts.hpp"

namespace maf_sandbox::runtime {

inline constexpr const char* kHostImage = "host";
inline constexpr const char* kDefaultTag = "latest";

// "name[:tag]" with name [a-z0-9][a-z0-9._-]* components separated by '/', tag
// [A-Za-z0-9_][A-Za-z0-9._-]{0,127}; the tag defaults to "latest".
struct ImageRef {
    std::string name;
    std::string tag = kDefaultTag;
    std::string str() const { return name + ":" + tag; }
    bool operator==(const ImageRef&) const = default;
};
// Throws InvalidArgument saying what is wrong.
ImageRef parse_image_ref(std::string_view text);

struct ReadOnlyBind {
    std::filesystem::path host_path;  // a directory or a file on this machine
    std::string guest_path;           // absolute; the mount point exists in lower_dir
    bool operator==(const ReadOnlyBind&) const = default;
};

// Everything the runtime needs to build a sandbox's root from an image.
struct MountPlan {
    std::string image;                   // "name:tag"
    std::filesystem::path lower_dir;     // the overlay's read-only lower layer
    std::vector<ReadOnlyBind> ro_binds;  // bind after mounting the overlay, in order
    uid_t uid = 0;                       // the guest user, as ids inside the sandbox
    gid_t gid = 0;
    std::string user_name;                   // as the image names it ("" when only numeric)
    std::map<std::string, std::string> env;  // the image's environment (PATH at least)
    std::string workdir;                     // the image's working directory ("" when unset)
};

struct ImageInfo {
    ImageRef ref;
    bool builtin = false;
    std::string source;  // "host", "rootfs-tarball", "docker-save", "oci-layout"
    std::filesystem::path rootfs;
    std::string user;  // the image config's User ("" when unset)
    std::map<std::string, std::string> env;
    std::string workdir;
    std::uint64_t created_at_unix = 0;
};

// The guest user of the `host` image: unprivileged by default.
inline constexpr uid_t kHostImageUid = 1000;
inline constexpr gid_t kHostImageGid = 1000;
inline constexpr const char* kHostImageUser = "sandbox";

class ImageStore {
  public:
    // Creates <state>/images when missing. Throws SystemError.
    explicit ImageStore(std::filesystem::path state_dir);

    const std::filesystem::path& images_dir() const noexcept { return images_dir_; }

    // Imports an archive as `ref`. The archive kind is detected from its contents: a top-level
    // manifest.json (docker save) or oci-layout + index.json (OCI layout) makes it an image whose
    // layers are applied in order, honouring whiteouts (.wh.NAME) and opaque directories
    // (.wh..wh..opq); anything else is a root filesystem tarball. Absolute paths, `..`, links
    // escaping the rootfs and extraction through a link are refused (InvalidArgument) and leave
    // nothing behind; device nodes are skipped. Records the config's User, Env and WorkingDir.
    // Throws InvalidArgument for a bad ref, `host`, or an existing image (remove it first).
    ImageInfo import(const std::filesystem::path& archive, std::string_view ref);

    // The built-in host image followed by every imported image, sorted by reference.
    std::vector<ImageInfo> list() const;

    // Removes an imported image. Throws InvalidArgument for `host` or an unknown image.
    void remove(std::string_view ref);

    // The mount plan for `ref`; builds the host skeleton on first use (idempotent, race-free
    // across processes). Throws InvalidArgument "unknown image 'x'; run `maf-sandbox images
    // list` ..." for an image that is not there.
    MountPlan resolve(std::string_view ref) const;

  private:
    MountPlan resolve_host() const;
    std::filesystem::path image_dir(const ImageRef& ref) const;

    std::filesystem::path state_dir_;
    std::filesystem::path images_dir_;
};

// The root plan for an image: its lower layer, its read-only binds, its guest directories. The
// sizes keep their defaults and the ids are filled in by launch_sandbox.
RootPlan root_plan_for(const MountPlan& image, std::vector<std::string> guest_dirs);

}  // namespace maf_sandbox::runtime
