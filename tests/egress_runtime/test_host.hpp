// A test host the tests create themselves: a network namespace joined to the host's by a veth
// pair (10.219.N.1 on the host side, 10.219.N.2 inside), serving a tiny HTTP server on port 80.
// Everything (server thread, veth, namespace) is removed when the object goes away.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::egress_testing {

using runtime::UniqueFd;

class TestHost {
  public:
    TestHost() {
        const auto pid = static_cast<unsigned>(::getpid());
        netns_ = fmt::format("maf-ert-{}", pid);
        host_link_ = fmt::format("mert{}h", pid % 10000000);
        guest_link_ = fmt::format("mert{}g", pid % 10000000);
        // A /30 of 10.219.0.0/16 per test process, so parallel test runs do not collide.
        const unsigned block = pid % 16384;
        subnet_ = fmt::format("10.219.{}.{}", block / 64, (block % 64) * 4);
        host_address_ = fmt::format("10.219.{}.{}", block / 64, (block % 64) * 4 + 1);
        address_ = fmt::format("10.219.{}.{}", block / 64, (block % 64) * 4 + 2);
        try {
            run(fmt::format("ip netns add {}", netns_));
            run(fmt::format("ip link add {} type veth peer name {} netns {}", host_link_,
                            guest_link_, netns_));
            run(fmt::format("ip addr add {}/30 dev {}", host_address_, host_link_));
            run(fmt::format("ip link set {} up", host_link_));
            run(fmt::format("ip -n {} addr add {}/30 dev {}", netns_, address_, guest_link_));
            run(fmt::format("ip -n {} link set {} up", netns_, guest_link_));
            run(fmt::format("ip -n {} link set lo up", netns_));
            listener_ = listen_inside(80);
            stop_ = UniqueFd(::eventfd(0, EFD_CLOEXEC));
            server_ = std::thread([this] { serve(); });
        } catch (...) {
            cleanup();
            throw;
        }
    }
    TestHost(const TestHost&) = delete;
    TestHost& operator=(const TestHost&) = delete;
    ~TestHost() { cleanup(); }

    // The server's address inside its namespace (port 80).
    const std::string& address() const { return address_; }
    int requests() const { return requests_.load(); }

  private:
    static void run(const std::string& command) {
        const std::string quiet = command + " >/dev/null 2>&1";
        if (std::system(quiet.c_str()) != 0) {
            throw std::runtime_error("test host setup failed: " + command);
        }
    }

    // A listening socket created by a thread that joined the namespace: the socket stays there.
    UniqueFd listen_inside(std::uint16_t port) const {
        UniqueFd out;
        std::string error;
        std::thread joiner([&] {
            UniqueFd ns(::open(fmt::format("/run/netns/{}", netns_).c_str(), O_RDONLY | O_CLOEXEC));
            if (!ns || ::setns(ns.get(), CLONE_NEWNET) != 0) {
                error = "setns";
                return;
            }
            UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
            const int one = 1;
            ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            sockaddr_in address{};
            address.sin_family = AF_INET;
            address.sin_port = htons(port);
            ::inet_pton(AF_INET, address_.c_str(), &address.sin_addr);
            if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
                ::listen(fd.get(), 64) != 0) {
                error = "bind";
                return;
            }
            out = std::move(fd);
        });
        joiner.join();
        if (!out) {
            throw std::runtime_error("test host listener: " + error);
        }
        return out;
    }

    void serve() {
        for (;;) {
            pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0 || fds[1].revents != 0) {
                return;
            }
            UniqueFd connection(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (!connection) {
                continue;
            }
            std::string request;
            char chunk[4096];
            while (request.find("\r\n\r\n") == std::string::npos) {
                pollfd in{connection.get(), POLLIN, 0};
                if (::poll(&in, 1, 2000) <= 0) {
                    break;
                }
                const auto n = ::read(connection.get(), chunk, sizeof chunk);
                if (n <= 0) {
                    break;
                }
                request.append(chunk, static_cast<std::size_t>(n));
            }
            ++requests_;
            const std::string response =
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n"
                "Connection: close\r\n\r\ntest-host\n";
            [[maybe_unused]] auto written =
                ::send(connection.get(), response.data(), response.size(), MSG_NOSIGNAL);
        }
    }

    void cleanup() {
        if (server_.joinable()) {
            const std::uint64_t one = 1;
            [[maybe_unused]] auto n = ::write(stop_.get(), &one, sizeof one);
            server_.join();
        }
        listener_.reset();
        // Deleting one end of a veth deletes both; the namespace goes last.
        [[maybe_unused]] const int link =
            std::system(fmt::format("ip link del {} >/dev/null 2>&1", host_link_).c_str());
        [[maybe_unused]] const int ns =
            std::system(fmt::format("ip netns del {} >/dev/null 2>&1", netns_).c_str());
    }

    std::string netns_, host_link_, guest_link_, subnet_, host_address_, address_;
    UniqueFd listener_;
    UniqueFd stop_;
    std::thread server_;
    std::atomic<int> requests_{0};
};

}  // namespace maf_sandbox::egress_testing
