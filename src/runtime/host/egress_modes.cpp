// Which egress modes this host can enforce, checked by the host before it launches a sandbox (the
// supervisor starts the services; the host only refuses what it could not start).
#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/kernel/rootless.hpp"
#include "maf_sandbox/runtime/wire/sandbox_files.hpp"

namespace maf_sandbox::runtime {

std::string egress_unavailable_reason(Egress mode) {
    if (mode == Egress::closed) {
        return {};
    }
    // The egress proxy and slirp4netns run as the sandbox's own service ids, which a rootless
    // user namespace does not map (rootless.hpp): a rootless sandbox has a closed network only.
    if (running_rootless()) {
        return "a rootless sandbox has a closed network only (the egress proxy and slirp4netns "
               "need service ids of their own); run as root for allowlist or unrestricted egress";
    }
    if (mode != Egress::unrestricted) {
        return {};
    }
    if (!find_slirp4netns()) {
        return "slirp4netns is not installed (Debian package slirp4netns)";
    }
    UniqueFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
    if (!tun) {
        return fmt::format("/dev/net/tun cannot be opened ({})", std::strerror(errno));
    }
    return {};
}

std::vector<Egress> enforceable_egress_modes() {
    std::vector<Egress> modes{Egress::closed};
    if (egress_unavailable_reason(Egress::allowlist).empty()) {
        modes.push_back(Egress::allowlist);
    }
    if (egress_unavailable_reason(Egress::unrestricted).empty()) {
        modes.push_back(Egress::unrestricted);
    }
    return modes;
}

}  // namespace maf_sandbox::runtime
