// The `host` image's skeleton (host_skeleton.hpp).
#include "host_skeleton.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>

#include "../kernel/fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/kernel/guest_fs.hpp"

namespace maf_sandbox::runtime::host_skeleton {

namespace fs = std::filesystem;

namespace {

// The skeleton is a tree we build ourselves in a fresh staging directory; it is still made
// through GuestFs, fd-relative from its root, like every tree the runtime writes.
void write_text(const GuestFs& tree, const std::string& path, std::string_view text,
                mode_t mode = 0644) {
    GuestWriteOptions options;
    options.mode = mode;
    tree.write(path, text, options);
}

void make_dir_mode(const GuestFs& tree, const std::string& path, mode_t mode) {
    const auto dir = tree.make_directory(path);
    if (::fchmod(dir.get(), mode) != 0) {
        throw SystemError(errno, fmt::format("setting the mode of the skeleton's '{}'", path));
    }
}

}  // namespace

void build_skeleton(const fs::path& root) {
    if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
        throw SystemError(errno, fmt::format("creating '{}'", root.string()));
    }
    // Owned by whoever is root inside: host root, or a rootless user (its namespace's root).
    const auto tree = GuestFs::open(root, GuestOwner{::geteuid(), ::getegid()});
    make_dir_mode(tree, "/", 0755);
    for (const char* dir :
         {"usr", "proc", "dev", "etc", "home", "run", "var", "mnt", "sys", "maf-sandbox"}) {
        make_dir_mode(tree, fmt::format("/{}", dir), 0755);
    }
    make_dir_mode(tree, "/tmp", 01777);
    make_dir_mode(tree, "/var/tmp", 01777);
    make_dir_mode(tree, "/root", 0700);
    for (const char* dir : kHostLibDirs) {
        const auto host = fs::path("/") / dir;
        struct stat st {};
        if (::lstat(host.c_str(), &st) != 0) {
            continue;
        }
        if (S_ISLNK(st.st_mode)) {  // merged /usr: /bin -> usr/bin, replicated as is
            std::error_code error;
            const auto target = fs::read_symlink(host, error);
            if (!error) {
                tree.symlink(fmt::format("/{}", dir), target.string());
            }
        } else if (S_ISDIR(st.st_mode)) {
            make_dir_mode(tree, fmt::format("/{}", dir), 0755);
        }
    }
    for (const char* entry : kHostEtcBinds) {
        const auto host = fs::path("/") / entry;
        struct stat st {};
        if (::stat(host.c_str(), &st) != 0) {
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            make_dir_mode(tree, fmt::format("/{}", entry), 0755);
        } else {
            write_text(tree, fmt::format("/{}", entry), "");
        }
    }
    write_text(tree, "/etc/passwd",
               fmt::format("root:x:0:0:root:/root:/bin/sh\n"
                           "{0}:x:{1}:{2}:{0}:/maf-sandbox/work:/bin/sh\n"
                           "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                           kHostImageUser, kHostImageUid, kHostImageGid));
    write_text(
        tree, "/etc/group",
        fmt::format("root:x:0:\n{0}:x:{1}:\nnogroup:x:65534:\n", kHostImageUser, kHostImageGid));
    write_text(tree, "/etc/hosts", "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost\n");
    write_text(tree, "/etc/hostname", "sandbox\n");
    write_text(tree, "/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n");
    write_text(tree, "/etc/resolv.conf", "");  // no network by default: nothing to resolve with
    detail::write_file_durably(root.parent_path() / "skeleton-version", kSkeletonVersion, 0644,
                               false);
}

}  // namespace maf_sandbox::runtime::host_skeleton
