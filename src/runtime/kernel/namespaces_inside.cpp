// The inside half of the sandbox's namespaces: what PID 1 fills in from within them that the
// kernel leaves empty, the hostname and the loopback interface of the new network namespace.
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/namespaces.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

void set_hostname(std::string_view hostname) {
    if (::sethostname(hostname.data(), hostname.size()) != 0) {
        throw SystemError(errno, fmt::format("setting the sandbox's hostname to {}", hostname));
    }
}

void bring_up_loopback() {
    UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock) {
        throw SystemError(errno, "opening a socket to configure the sandbox's loopback");
    }
    ifreq request{};
    std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
    if (::ioctl(sock.get(), SIOCGIFFLAGS, &request) != 0) {
        throw SystemError(errno, "reading the flags of the sandbox's loopback interface");
    }
    if ((request.ifr_flags & IFF_UP) != 0) {
        return;  // made up by the host (PendingLoopbackNamespace), which the sandbox cannot change
    }
    request.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (::ioctl(sock.get(), SIOCSIFFLAGS, &request) != 0) {
        throw SystemError(errno, "bringing the sandbox's loopback interface up");
    }
}

}  // namespace maf_sandbox::runtime
