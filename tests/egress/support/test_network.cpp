// Slot claiming, the certificate, the two hosts and the hosts file.
#include "test_network.hpp"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::egress_testing {

namespace {

constexpr int kSlots = 60;  // 10.231.1.0 .. 10.231.120.0

// Binds the abstract socket of the first free slot; the bound socket is the claim.
std::pair<int, runtime::UniqueFd> claim_slot() {
    for (int slot = 0; slot < kSlots; ++slot) {
        runtime::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (!fd) {
            throw SystemError(errno, "opening the socket that claims an egress test slot");
        }
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        const std::string name = fmt::format("maf-egress-slot-{}", slot);
        std::memcpy(addr.sun_path + 1, name.data(), name.size());
        const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
        if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), size) == 0) {
            return {slot, std::move(fd)};
        }
        if (errno != EADDRINUSE) {
            throw SystemError(errno, "claiming an egress test slot");
        }
    }
    throw Error(
        fmt::format("all {} egress test slots are in use; run fewer egress tests at once", kSlots));
}

}  // namespace

TestNetwork::TestNetwork() {
    auto [slot, lock] = claim_slot();
    slot_ = slot;
    slot_lock_ = std::move(lock);

    std::string pattern = "/tmp/maf-egress-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
        throw SystemError(errno, "creating the egress test directory under /tmp");
    }
    directory_ = pattern;
    try {
        const auto a_addresses = TestHostAddresses::for_subnet(2 * slot + 1);
        const auto b_addresses = TestHostAddresses::for_subnet(2 * slot + 2);
        const auto authority =
            net::generate_self_signed({"allowed.test", "api.wild.test", "alt.test", "ported.test",
                                       "denied.test", "other.test", "allowed.test.denied.test"},
                                      {a_addresses.host_ipv4, b_addresses.host_ipv4});
        ca_pem_ = authority.ca_certificate_pem;
        a_ = std::make_unique<TestHost>("A", fmt::format("mafeg{}a", slot), a_addresses,
                                        authority.server);
        b_ = std::make_unique<TestHost>("B", fmt::format("mafeg{}b", slot), b_addresses,
                                        authority.server);
        hosts_file_ = directory_ / "hosts";
        std::ofstream out(hosts_file_);
        out << fmt::format(
                   "{} allowed.test api.wild.test wild.test notwild.test alt.test ported.test "
                   "private.test\n",
                   a_addresses.host_ipv4)
            << fmt::format("{} denied.test other.test allowed.test.denied.test\n",
                           b_addresses.host_ipv4)
            << "127.0.0.1 loopback.test\n"
            << "169.254.169.254 metadata.test\n";
        out.close();
        if (!out) {
            throw Error(fmt::format("writing the egress test hosts file {}", hosts_file_.string()));
        }
    } catch (...) {
        b_.reset();
        a_.reset();
        std::error_code ignored;
        std::filesystem::remove_all(directory_, ignored);
        throw;
    }
}

TestNetwork::~TestNetwork() {
    b_.reset();
    a_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
}

}  // namespace maf_sandbox::egress_testing
