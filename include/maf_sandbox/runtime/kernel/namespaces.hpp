// The sandbox's namespaces and its host ids. Split as the work is: the host half
// (namespaces_host.cpp) creates the namespaces and writes the id maps from outside, around the
// clone; the inside half (namespaces_inside.cpp) fills in, from within the new namespaces, what
// the kernel leaves empty.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string_view>

namespace maf_sandbox::runtime {

// How many host ids past a sandbox's guest ids belong to its own unprivileged services.
inline constexpr std::uint32_t kServiceIdCount = 2;

// A sandbox's host ids. Guest ids [0, count) map to host ids [host_base, host_base + count); the
// next kServiceIdCount host ids belong to the sandbox's services (its egress proxy and its
// slirp4netns), which no guest id maps to, so no guest process can ever hold them.
struct IdMapping {
    uid_t host_base = 100000;
    std::uint32_t count = 65536;
    uid_t to_host(uid_t guest) const noexcept { return host_base + guest; }
    // The host uid (and gid) the egress proxy runs as.
    uid_t proxy_id() const noexcept { return host_base + count; }
    // The host uid (and gid) slirp4netns runs as.
    uid_t slirp_id() const noexcept { return host_base + count + 1; }
    // Every host id the sandbox owns, guest and service ids together.
    std::uint32_t span() const noexcept { return count + kServiceIdCount; }
};

// The one mapping every sandbox shared before each got a slot of the host id pool (id_ranges.hpp):
// what a handle recorded by an older runtime had. launch_sandbox never hands it out.
inline constexpr IdMapping kDefaultIdMapping{};

// --- host half (namespaces_host.cpp): the supervisor's host-side half, around the clone ---------

// Every namespace a sandbox gets: user, mount, PID, IPC, UTS, network and cgroup.
unsigned long sandbox_namespace_flags() noexcept;

// fork() with namespace flags (raw clone, no new stack: the child continues like a fork child).
// Throws SystemError.
pid_t clone_with_namespaces(unsigned long flags);

// As clone_with_namespaces, with CLONE_NEWUSER in `flags`, from a caller running as host root: the
// new user namespace is owned by host uid `owner` and gid `owner_group` (the kernel takes the
// creator's effective ids), so every per-user count the sandbox makes (inotify, fanotify, queued
// signals, message queues, namespaces) is charged to that uid and bounded by its limits, never
// host root's. Only the effective ids change, for the clone alone: the caller is root again on
// return. The child resolves no host path: it enters the prepared root through the working
// directory it inherits. Throws SystemError.
pid_t clone_with_owned_namespaces(unsigned long flags, uid_t owner, gid_t owner_group);

// Writes uid_map and gid_map of `pid` (a child in a new user namespace). Throws SystemError.
void write_id_maps(pid_t pid, const IdMapping& mapping);

// --- inside half (namespaces_inside.cpp): PID 1, within the new namespaces ----------------------

// Inside the new namespaces: sets the UTS hostname and brings the loopback interface up (the
// network namespace then has loopback only: no route, no DNS). Throw SystemError.
void set_hostname(std::string_view hostname);
void bring_up_loopback();

}  // namespace maf_sandbox::runtime
