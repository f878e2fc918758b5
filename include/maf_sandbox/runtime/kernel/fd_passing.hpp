// Handing an open descriptor across a Unix socket (SCM_RIGHTS), one byte per message. Used
// wherever a process that may not open a name itself receives what a more privileged one opened.
#pragma once

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

// Async-signal-safe: sends the one byte `byte` carrying a copy of `fd` (SCM_RIGHTS) on the Unix
// socket `channel`. False on failure, with errno set.
bool send_fd(int channel, int fd, char byte) noexcept;

// Blocks for one message from send_fd: its byte, and its descriptor (close-on-exec). Invalid on
// EOF, an error, or a message that does not carry exactly one descriptor. `flags` adds recvmsg
// flags, e.g. MSG_DONTWAIT for a sender that has already exited.
UniqueFd receive_fd(int channel, char& byte, int flags = 0) noexcept;

}  // namespace maf_sandbox::runtime
