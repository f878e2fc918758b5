// The host half of the sandbox's namespaces: what the supervisor's host-side half does around the
// clone. It creates the namespaces (as the sandbox's owner uid, so per-user counts are charged to
// it) and, from outside, writes the new user namespace's id maps.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/namespaces.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

unsigned long sandbox_namespace_flags() noexcept {
    return CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET |
           CLONE_NEWCGROUP;
}

pid_t clone_with_namespaces(unsigned long flags) {
    // A null stack gives fork semantics: the child runs on a copy of the caller's stack.
    const long pid = ::syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
    if (pid < 0) {
        throw SystemError(errno, "creating the sandbox's namespaces (clone)",
                          "run as root on a kernel with user, PID, network and cgroup namespaces");
    }
    return static_cast<pid_t>(pid);
}

pid_t clone_with_owned_namespaces(unsigned long flags, uid_t owner, gid_t owner_group) {
    // The effective ids only: the real and saved ids stay 0, which is what lets this process (and
    // only it) become root again below. The file-system ids follow the effective ones: the child
    // resolves no host path (it enters its root through the working directory it inherits), and
    // as the owner uid it could not traverse the state directory (0700, root's) if it tried.
    if (::setresgid(static_cast<gid_t>(-1), owner_group, static_cast<gid_t>(-1)) != 0) {
        throw SystemError(errno, "taking the sandbox's owner gid to create its user namespace");
    }
    if (::setresuid(static_cast<uid_t>(-1), owner, static_cast<uid_t>(-1)) != 0) {
        const int error = errno;
        ::setresgid(static_cast<gid_t>(-1), 0, static_cast<gid_t>(-1));
        throw SystemError(error, "taking the sandbox's owner uid to create its user namespace");
    }
    long pid = 0;
    int error = 0;
    if (::geteuid() != owner) {
        error = EPERM;
    } else {
        pid = ::syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
        error = errno;
        if (pid == 0) {
            return 0;  // the child: root of its new user namespace, owned by `owner`
        }
    }
    // Root again (the real uid is 0), then the group (which needs CAP_SETGID back). Changing the
    // effective uid made this process non-dumpable: the host's root still reaches it, but make it
    // plain again for the helpers it starts.
    if (::setresuid(static_cast<uid_t>(-1), 0, static_cast<uid_t>(-1)) != 0 ||
        ::setresgid(static_cast<gid_t>(-1), 0, static_cast<gid_t>(-1)) != 0) {
        std::_Exit(1);  // never continue as anything but root: the sandbox is not started
    }
    ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    if (pid < 0 || error == EPERM) {
        throw SystemError(pid < 0 ? error : EPERM,
                          "creating the sandbox's namespaces (clone) as its owner uid",
                          "run as root on a kernel with user, PID, network and cgroup namespaces");
    }
    return static_cast<pid_t>(pid);
}

namespace {

void write_proc_file(pid_t pid, const char* name, const std::string& content) {
    const auto path = fmt::format("/proc/{}/{}", pid, name);
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd ||
        ::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
        throw SystemError(errno, fmt::format("writing {}", path),
                          "run as root so the runtime can map the sandbox's users");
    }
}

}  // namespace

void write_id_maps(pid_t pid, const IdMapping& mapping) {
    const auto line = fmt::format("0 {} {}\n", mapping.host_base, mapping.count);
    write_proc_file(pid, "uid_map", line);
    write_proc_file(pid, "gid_map", line);
}

}  // namespace maf_sandbox::runtime
