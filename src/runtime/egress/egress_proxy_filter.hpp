// The egress proxy's own syscall filter: an allow-list of what the proxy does (its event loop,
// TCP to the guest and upstream, name resolution, appending to its log) and nothing else.
// Private to the egress room and the supervisor's network steps (guest_network.cpp), whose proxy
// process installs it after dropping to its service user and before it serves.
#pragma once

#include <sys/types.h>

namespace maf_sandbox::runtime {

// Installs the filter on the calling, still single-threaded process; every thread it starts
// later inherits it. Calls outside the list fail with EPERM (execve, ptrace, mount, namespaces,
// a signal to any process but itself, sockets of other families, ...); a foreign ABI kills the
// process. Throws SystemError when libseccomp cannot build or load it.
void install_egress_proxy_filter();

}  // namespace maf_sandbox::runtime
