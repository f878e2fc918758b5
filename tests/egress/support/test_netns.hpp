// Network namespaces and veth links that a test makes for itself and always takes down again.
//
// A TestNetns is created by a short-lived thread's unshare(CLONE_NEWNET) and held by an fd only:
// nothing is named under /run/netns, so a test that dies takes its namespaces (and the veth pairs
// inside them) with it. Sockets created on a thread that entered the namespace stay in it, so a
// test host's servers can run on any thread once their sockets exist.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::egress_testing {

class TestNetns {
  public:
    // Throws SystemError when the kernel refuses a new network namespace (run as root).
    TestNetns();
    TestNetns(TestNetns&&) noexcept = default;
    TestNetns& operator=(TestNetns&&) noexcept = default;

    int fd() const noexcept { return fd_.get(); }

    // Runs `fn` on a fresh thread that has entered this namespace and returns its result (or
    // rethrows its exception). The caller's own thread never changes namespace.
    template <class Fn>
    auto run_inside(Fn&& fn) const -> std::invoke_result_t<Fn&> {
        using Result = std::invoke_result_t<Fn&>;
        std::exception_ptr failure;
        if constexpr (std::is_void_v<Result>) {
            std::thread worker([&] {
                try {
                    enter();
                    fn();
                } catch (...) {
                    failure = std::current_exception();
                }
            });
            worker.join();
            if (failure) {
                std::rethrow_exception(failure);
            }
        } else {
            std::optional<Result> result;
            std::thread worker([&] {
                try {
                    enter();
                    result.emplace(fn());
                } catch (...) {
                    failure = std::current_exception();
                }
            });
            worker.join();
            if (failure) {
                std::rethrow_exception(failure);
            }
            return std::move(*result);
        }
    }

  private:
    void enter() const;  // setns on the calling thread
    runtime::UniqueFd fd_;
};

// One end's addressing: an IPv4 and an IPv6 address with their prefix lengths.
struct LinkAddresses {
    std::string ipv4_cidr;  // "10.231.1.1/24"
    std::string ipv6_cidr;  // "fd31:a7c2:e9b0:1::1/64"
};

// A veth pair: `host_name` stays in the creating thread's namespace, `peer_name` goes into
// `netns`; both get their addresses (IPv6 without duplicate address detection, so they work at
// once) and are brought up, with the namespace's loopback. The destructor deletes the host end,
// which removes the pair. A stale link with `host_name` left by a crashed run is deleted first:
// callers choose names that only these tests use.
class VethLink {
  public:
    VethLink(const TestNetns& netns, std::string host_name, std::string peer_name,
             const LinkAddresses& host_end, const LinkAddresses& peer_end);
    ~VethLink();
    VethLink(const VethLink&) = delete;
    VethLink& operator=(const VethLink&) = delete;

    const std::string& host_name() const noexcept { return host_name_; }

  private:
    std::string host_name_;
};

}  // namespace maf_sandbox::egress_testing
