// Internal: running one file operation with a sandbox's own authority instead of the host's.
//
// The ACAS file plane follows the guest's links (it serves the guest's view of its file system),
// so the host must never resolve those names as host root: a guest link to a host path, or to the
// sandbox's /proc/sys, would turn a client's write into a host write. Every file-plane operation
// therefore runs in a forked, single-threaded child that has joined the sandbox's user and mount
// namespaces, is rooted at the guest's root and runs as the guest's root (uid 0 of the sandbox's
// user namespace: no capability in the host's namespaces, and within its own only the five file
// capabilities). The child sends its answer back in frames over a socket pair.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "file_plane.hpp"
#include "maf_sandbox/runtime/unique_fd.hpp"

namespace maf_sandbox::emulator {

// Descriptors on one sandbox, opened by the host from its PID 1 (/proc/<pid>/ns/user,
// /proc/<pid>/ns/mnt, /proc/<pid>/root) after checking that the pid is still that sandbox's.
struct GuestAuthority {
    runtime::UniqueFd user_ns;
    runtime::UniqueFd mount_ns;
    runtime::UniqueFd root;
};

// What an operation inside the child uses to answer: zero or more data chunks, then exactly one
// final payload (or a PlaneError, which the child reports on its own).
class ReplyChannel {
  public:
    explicit ReplyChannel(int fd) : fd_(fd) {}
    // Streams bytes (a file's content) to the caller; the caller caps what it accepts.
    void data(std::string_view bytes);
    // The operation's result; nothing may follow it.
    void done(std::string_view payload);

  private:
    void frame(char kind, std::string_view payload);
    int fd_;
};

struct GuestReply {
    std::string data;     // the concatenated data chunks
    std::string payload;  // the final payload
};

// Forks a child that enters `authority` (see the file comment) and runs `operation` there, with
// `/` being the guest's root. Returns what the operation sent. Throws PlaneError: the operation's
// own, 413 when the data passes `max_data` bytes, 504 when the child runs past `deadline` (it is
// killed), 500 when it could not enter the sandbox or ended without an answer.
// `operation` runs in the child only: it must not touch the emulator's threads, locks, logger or
// sockets (the child holds a copy of the emulator's memory, but only its own thread).
GuestReply run_with_guest_authority(const GuestAuthority& authority,
                                    const std::function<void(ReplyChannel&)>& operation,
                                    std::uint64_t max_data, std::chrono::milliseconds deadline);

}  // namespace maf_sandbox::emulator
