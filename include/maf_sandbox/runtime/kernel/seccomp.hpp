// The seccomp filters: the guest's, installed once by PID 1 and inherited by every guest process,
// and the one stacked on slirp4netns's own (seccomp.cpp). install_seccomp may run between fork
// and exec.
#pragma once

#include <linux/filter.h>

#include <vector>

namespace maf_sandbox::runtime {

// The guest's syscall filter as a BPF program, compiled once per process. Denied calls fail with
// EPERM (clone3 with ENOSYS so libc falls back to clone, whose namespace flags are filtered).
const std::vector<sock_filter>& guest_seccomp_program();

// The filter stacked on slirp4netns's own before it execs, compiled once per process: the native
// AIO and io_uring calls answer ENOSYS (host-wide budgets no namespace divides), and everything
// else is left to slirp4netns's own filter.
const std::vector<sock_filter>& slirp_seccomp_program();

// Async-signal-safe: sets no_new_privs and installs `program` on the calling thread.
bool install_seccomp(const std::vector<sock_filter>& program) noexcept;

}  // namespace maf_sandbox::runtime
