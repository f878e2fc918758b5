// Private fd-anchored helpers shared by GuestFs, the registry and the image store.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "maf_sandbox/runtime/kernel/fd_passing.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime::detail {

// openat2(dirfd, path, flags | O_CLOEXEC) with RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS, retrying EINTR/EAGAIN. Returns the fd, or -errno.
int open_in_root(int dirfd, const std::string& path, int flags, mode_t mode = 0);

// Removes `name` in `parent_fd` and everything beneath it, by directory fd with O_NOFOLLOW at
// every level: a link is unlinked, never followed. Missing is success. With `stay_on_device`, a
// directory on another filesystem (a mount) is refused with SystemError(EXDEV) instead of entered.
// Throws SystemError naming `describe` (how the caller calls the path) on failure.
void remove_tree_at(int parent_fd, const std::string& name, bool stay_on_device,
                    std::string_view describe);

// Removes a host directory tree the same way (parent opened O_NOFOLLOW; missing is success).
void remove_host_tree(const std::filesystem::path& path, bool stay_on_device);

// open_trusted_state_dir (state_dir.hpp) for a caller that needs no descriptor: makes the state
// directory `path` (or one of its roots) with `mode`, refuses one another user controls, and
// tightens a looser one of ours. Throws SystemError.
void make_state_dir(const std::filesystem::path& path, mode_t mode);

// core random_hex (random_id.hpp), under the name the runtime calls it by.
std::string random_hex(std::size_t bytes);

// Writes `content` to `path` crash-safely: a temporary sibling (O_EXCL), fsync, rename, fsync of
// the directory. With `sync` false the two fsyncs are skipped: the rename alone still means a
// reader (or a process that crashed mid-write) sees the old content or the new, never a torn file;
// only an operating-system crash may then lose the write. Throws SystemError.
void write_file_durably(const std::filesystem::path& path, std::string_view content,
                        mode_t mode = 0600, bool sync = true);

// Reads a whole host file (at most `max_bytes`); throws SystemError, or InvalidArgument when
// larger.
std::string read_host_file(const std::filesystem::path& path, std::size_t max_bytes);

// Writes all of `data` to `fd`, retrying short writes. Returns 0 or errno.
int write_all(int fd, std::string_view data);

// Async-signal-safe: reads exactly `size` bytes, retrying short reads and EINTR; false on EOF or
// an error.
bool read_exact(int fd, char* data, std::size_t size) noexcept;

// Descriptor passing (fd_passing.hpp), named here too for the room's own callers.
using runtime::receive_fd;
using runtime::send_fd;

}  // namespace maf_sandbox::runtime::detail
