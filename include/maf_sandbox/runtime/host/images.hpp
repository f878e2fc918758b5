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

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/mounts.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

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

// Caps on what one import writes into the store, checked before each write (never after), so an
// archive that would pass one is refused while the store still has room; the partial unpack is
// then removed. Every byte an import writes counts toward max_bytes, the layers a `docker save`
// or OCI archive stages on the way included. The free-space floor keeps the store's filesystem
// from being filled whatever the caps say: an import stops before that filesystem's free bytes
// or free inodes fall below min_free_percent of its size.
struct ImportLimits {
    std::uint64_t max_bytes = std::uint64_t{16} << 30;
    std::uint64_t max_entries = 1'000'000;
    std::uint64_t max_depth = 256;  // path components of an entry ("a/b/c" is 3)
    std::uint64_t min_free_percent = 5;
    // The settings that raise each cap, as a refusal names them: the CLI's flags by default; the
    // emulator names its own.
    std::string max_bytes_setting = "--max-bytes";
    std::string max_entries_setting = "--max-entries";
    std::string max_depth_setting = "--max-depth";
    std::string min_free_setting = "--min-free-percent";
};

// An import refused by one of the ImportLimits. The message names the cap, the value reached and
// the setting that raises it.
class ImageImportLimitExceeded : public InvalidArgument {
  public:
    ImageImportLimitExceeded(const std::string& message, std::string cap, std::uint64_t limit,
                             std::uint64_t reached, std::string setting)
        : InvalidArgument(message),
          cap_(std::move(cap)),
          limit_(limit),
          reached_(reached),
          setting_(std::move(setting)) {}
    std::string_view type_name() const noexcept override { return "ImageImportLimitExceeded"; }
    // "bytes", "entries", "depth" or "free space".
    const std::string& cap() const noexcept { return cap_; }
    std::uint64_t limit() const noexcept { return limit_; }
    std::uint64_t reached() const noexcept { return reached_; }
    const std::string& setting() const noexcept { return setting_; }

  private:
    std::string cap_;
    std::uint64_t limit_;
    std::uint64_t reached_;
    std::string setting_;
};

// What a sweep of the store's leftovers did (ImageStore::sweep).
struct ImageSweepReport {
    int imports_removed = 0;   // `.import-*` staging directories of imports that are gone
    int removals_resumed = 0;  // `.remove-*` directories of removals that are gone, finished
    int busy = 0;              // leftovers an import or removal still in progress holds
    std::vector<std::string> errors;
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
    // Throws InvalidArgument for a bad ref, `host`, or an existing image (remove it first), and
    // ImageImportLimitExceeded for an archive over one of `limits`. Sweeps the store first.
    ImageInfo import(const std::filesystem::path& archive, std::string_view ref,
                     const ImportLimits& limits = {});

    // The built-in host image followed by every imported image, sorted by reference.
    std::vector<ImageInfo> list() const;

    // Removes an imported image: it leaves the list at once, then its tree is removed with a
    // bounded number of descriptors however deep it is, never following a link in it. Throws
    // InvalidArgument for `host` or an unknown image. A removal that fails half-way leaves a
    // `.remove-*` directory that the next sweep finishes. Sweeps the store first.
    void remove(std::string_view ref);

    // Removes what imports and removals whose process is gone left in the store (`.import-*`,
    // `.remove-*`). A process in the middle of one holds an flock on its directory for as long
    // as it lives, so a leftover is one nobody holds; one still held is counted busy and kept.
    // Never throws for one leftover: its failure is in the report.
    ImageSweepReport sweep() const;

    // The mount plan for `ref`; builds the host skeleton on first use (idempotent, race-free
    // across processes). Throws InvalidArgument "unknown image 'x'; run `maf-sandbox images
    // list` ..." for an image that is not there.
    MountPlan resolve(std::string_view ref) const;

  private:
    MountPlan resolve_host() const;
    std::filesystem::path image_dir(const ImageRef& ref) const;

    std::filesystem::path state_dir_;
    std::filesystem::path images_dir_;
    UniqueFd images_fd_;  // the store's directory, opened through the state-directory trust rule
};

// The root plan for an image: its lower layer, its read-only binds, its guest directories. The
// sizes keep their defaults and the ids are filled in by launch_sandbox.
RootPlan root_plan_for(const MountPlan& image, std::vector<std::string> guest_dirs);

}  // namespace maf_sandbox::runtime
