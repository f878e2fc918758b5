// The egress proxy's seccomp filter, installed in a forked child: what the proxy does still works
// (sockets of its families, threads, a signal to itself, its files), what it never does fails with
// EPERM (exec, tracing, namespaces, mounts, other socket families, a signal to another process).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netdb.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "egress_proxy_filter.hpp"

namespace maf_sandbox::runtime {
namespace {

// Runs `body` in a forked child under the filter; the child's exit code is the index of the first
// expectation that failed (0: all held).
int under_filter(int (*body)()) {
    const pid_t child = ::fork();
    if (child == 0) {
        try {
            install_egress_proxy_filter();
        } catch (...) {
            ::_exit(100);
        }
        ::_exit(body());
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

TEST(EgressProxyFilter, WhatTheProxyDoesStillWorks) {
    EXPECT_EQ(under_filter([] {
                  for (const int family : {AF_INET, AF_INET6, AF_UNIX}) {
                      const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                      if (fd < 0) {
                          return 1;
                      }
                      ::close(fd);
                  }
                  if (::kill(::getpid(), 0) != 0) {
                      return 2;
                  }
                  bool ran = false;
                  std::thread([&ran] { ran = true; }).join();
                  if (!ran) {
                      return 3;
                  }
                  const int hosts = ::open("/etc/hosts", O_RDONLY | O_CLOEXEC);
                  if (hosts < 0) {
                      return 4;
                  }
                  ::close(hosts);
                  return 0;
              }),
              0);
}

TEST(EgressProxyFilter, NameResolutionRunsUnderIt) {
    // The files and the DNS paths of getaddrinfo, with AI_ADDRCONFIG's netlink probe: a name in
    // /etc/hosts resolves, a name nobody has fails as a lookup (never as a refused system call).
    EXPECT_EQ(under_filter([] {
                  addrinfo hints{};
                  hints.ai_socktype = SOCK_STREAM;
                  hints.ai_flags = AI_ADDRCONFIG;
                  addrinfo* found = nullptr;
                  if (::getaddrinfo("localhost", "80", &hints, &found) != 0) {
                      return 1;
                  }
                  ::freeaddrinfo(found);
                  found = nullptr;
                  const int rc = ::getaddrinfo("maf-filter-probe.invalid", "80", &hints, &found);
                  if (found != nullptr) {
                      ::freeaddrinfo(found);
                  }
                  return rc == EAI_SYSTEM ? 2 : 0;
              }),
              0);
}

TEST(EgressProxyFilter, WhatTheProxyNeverDoesIsRefused) {
    EXPECT_EQ(under_filter([] {
                  char* const argv[] = {const_cast<char*>("/bin/false"), nullptr};
                  if (::execve("/bin/false", argv, nullptr) == 0 || errno != EPERM) {
                      return 1;
                  }
                  if (::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) == 0 || errno != EPERM) {
                      return 2;
                  }
                  if (::unshare(CLONE_NEWUSER) == 0 || errno != EPERM) {
                      return 3;
                  }
                  if (::mount("none", "/tmp", "tmpfs", 0, nullptr) == 0 || errno != EPERM) {
                      return 4;
                  }
                  if (::socket(AF_PACKET, SOCK_RAW, 0) >= 0 || errno != EPERM) {
                      return 5;
                  }
                  if (::kill(::getppid(), 0) == 0 || errno != EPERM) {
                      return 6;
                  }
                  if (::fork() >= 0 || errno != EPERM) {  // a new process, not a thread
                      return 7;
                  }
                  return 0;
              }),
              0);
}

}  // namespace
}  // namespace maf_sandbox::runtime
