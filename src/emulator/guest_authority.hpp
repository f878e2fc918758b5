// Internal: running one file operation with a sandbox's own authority instead of the host's.
//
// The ACAS file plane follows the guest's links (it serves the guest's view of its file system),
// so the host must never resolve those names as host root: a guest link to a host path, or to the
// sandbox's /proc/sys, would turn a client's write into a host write. Every file-plane operation
// therefore runs in a child task that has joined the sandbox's user and mount namespaces, is
// rooted at the guest's root and runs as the guest's root (uid 0 of the sandbox's user namespace:
// no capability in the host's namespaces, and within its own only the five file capabilities).
//
// The child is cloned with CLONE_VM | CLONE_VFORK, as posix_spawn clones: it shares the
// emulator's memory (no page tables to copy: a fork of a large emulator is costly on a
// paravirtualised MMU), has its own descriptors, file-system root and credentials
// (setns(CLONE_NEWUSER) accepts it: it is alone in its thread group and shares no fs_struct), and
// the calling thread is suspended in the kernel until it exits. So the child may run ordinary C++
// (it stands in for the suspended thread: that thread's TLS, tcache and errno are idle), and it
// writes its answer straight into the caller's memory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "file_plane.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::emulator {

// Descriptors on one sandbox, opened by the host from its PID 1 (/proc/<pid>/ns/user,
// /proc/<pid>/ns/mnt, /proc/<pid>/root) after checking that the pid is still that sandbox's.
struct GuestAuthority {
    runtime::UniqueFd user_ns;
    runtime::UniqueFd mount_ns;
    runtime::UniqueFd root;
};

struct GuestReply {
    std::string data;              // the concatenated data chunks
    std::string payload;           // the final payload
    runtime::UniqueFd descriptor;  // the descriptor the operation passed back, if any
};

// What an operation inside the child uses to answer: zero or more data chunks, then the final
// payload. Writes into the caller's GuestReply (shared memory); throws Refusal 413 when the
// data would pass the caller's cap.
class ReplyChannel {
  public:
    ReplyChannel(GuestReply& reply, std::uint64_t max_data, int descriptor_channel = -1)
        : reply_(reply), max_data_(max_data), descriptor_channel_(descriptor_channel) {}
    // Streams bytes (a file's content) to the caller.
    void data(std::string_view bytes);
    // Hands an open descriptor (a checked regular file) to the caller, which then reads it in
    // pieces itself: the child's descriptor table is its own, so it travels over a socket. Only
    // for an operation run with `pass_descriptor`.
    void descriptor(int fd);
    // The operation's result.
    void done(std::string_view payload);

  private:
    GuestReply& reply_;
    std::uint64_t max_data_;
    int descriptor_channel_;
};

// Clones a child that enters `authority` (see the file comment) and runs `operation` there, with
// `/` being the guest's root. Returns what the operation sent. Throws Refusal: the operation's
// own, 413 when the data passes `max_data` bytes, 500 when the child could not enter the sandbox
// or ended without an answer. There is no deadline: nothing in the child waits for the guest
// (every open is non-blocking, FIFOs are refused or answer at once, and the child is outside the
// sandbox's cgroups, so a frozen sandbox does not freeze it).
// `operation` must not touch the emulator's other threads' objects (locks, logger, sockets).
// With `pass_descriptor`, the operation may hand back one descriptor (ReplyChannel::descriptor).
GuestReply run_with_guest_authority(const GuestAuthority& authority,
                                    const std::function<void(ReplyChannel&)>& operation,
                                    std::uint64_t max_data, bool pass_descriptor = false);

}  // namespace maf_sandbox::emulator
