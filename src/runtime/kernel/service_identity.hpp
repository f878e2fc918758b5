// The identities a sandbox's host-side services (its egress proxy and its slirp4netns) run as.
// Each service has a host uid of its own (IdMapping::proxy_id, IdMapping::slirp_id): no guest id
// maps to it, no other sandbox holds it, and it owns no host file but the service's own log, so a
// compromised service can signal, trace or write nothing of anyone else's. Private to the
// supervisor; called in the forked service process, before it execs or serves anything.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace maf_sandbox::runtime {

// Becomes uid and gid `id` with no supplementary groups, an empty bounding set, no capabilities,
// no_new_privs and not dumpable (its /proc files belong to root, so nobody of its own uid can read
// its memory or descriptors). Needs root. False when any step failed: the caller must not go on.
bool become_service_user(uid_t id) noexcept;

// slirp4netns's child joins the sandbox's network namespace (setns) and creates its tap device
// there, which needs CAP_SYS_ADMIN and CAP_NET_ADMIN over that namespace, and slirp4netns never
// drops a capability itself unless it runs as uid 0 (the root of some user namespace). So: becomes
// uid and gid `id` (as become_service_user), then joins the sandbox's user namespace `userns_fd`
// (which does not map `id`: the process is nobody there) and keeps exactly CAP_SYS_ADMIN and
// CAP_NET_ADMIN, in that namespace only, as its bounding, inheritable and ambient sets, so they
// survive the exec. It holds no capability over the host or any other sandbox. Needs root.
bool become_slirp_user(uid_t id, int userns_fd) noexcept;

// Needs root, before either call above. Moves the process into a mount namespace of its own in
// which every mount is read-only and nosuid, so the service can write no file on the host (not
// even a world-writable /tmp) beyond the descriptors it already holds. Device nodes stay usable
// (slirp4netns opens /dev/net/tun). When `tun_owner` is not 0, /dev/net there is a tiny tmpfs of
// its own holding one node, tun, that only `tun_owner` may open (the host's /dev/net/tun is
// root's alone, and slirp4netns opens it by name).
bool enter_read_only_mount_namespace(uid_t tun_owner = 0) noexcept;

// Caps the size of every file the process writes (RLIMIT_FSIZE) at `bytes`; a write past it fails
// with EFBIG instead of raising SIGXFSZ, which is ignored (the disposition survives exec). The
// kernel's backstop behind each log's own accounting.
bool limit_file_size(std::uint64_t bytes) noexcept;

}  // namespace maf_sandbox::runtime
