// Blocking servers on plain sockets: one poll thread per host accepts and answers UDP, and each TCP
// connection gets a thread of its own with short socket timeouts. Deliberately simple: the point
// is to count what arrives, not to be fast.
#include "test_host.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::egress_testing {

using runtime::UniqueFd;

std::string describe(const HostTraffic& traffic) {
    return fmt::format(
        "{} TCP connections ({} silent), {} TLS handshakes, {} HTTP requests, {} UDP datagrams",
        traffic.tcp_connections, traffic.silent_connections, traffic.tls_handshakes,
        traffic.http_requests, traffic.udp_datagrams);
}

TestHostAddresses TestHostAddresses::for_subnet(int subnet) {
    TestHostAddresses out;
    out.host_ipv4 = fmt::format("10.231.{}.2", subnet);
    out.local_ipv4 = fmt::format("10.231.{}.1", subnet);
    out.host_ipv6 = fmt::format("fd31:a7c2:e9b0:{:x}::2", subnet);
    out.local_ipv6 = fmt::format("fd31:a7c2:e9b0:{:x}::1", subnet);
    return out;
}

namespace {

constexpr int kIoTimeoutSeconds = 5;
constexpr std::size_t kMaxHead = 16 * 1024;

struct SslCtxDeleter {
    void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using SslCtx = std::unique_ptr<SSL_CTX, SslCtxDeleter>;

SslCtx make_server_context(const net::PemCredentials& tls) {
    SslCtx ctx(SSL_CTX_new(TLS_server_method()));
    if (!ctx) {
        throw Error("creating the test host's TLS context");
    }
    std::unique_ptr<BIO, decltype(&BIO_free)> chain(
        BIO_new_mem_buf(tls.certificate_chain_pem.data(),
                        static_cast<int>(tls.certificate_chain_pem.size())),
        &BIO_free);
    X509* leaf = PEM_read_bio_X509(chain.get(), nullptr, nullptr, nullptr);
    if (leaf == nullptr || SSL_CTX_use_certificate(ctx.get(), leaf) != 1) {
        X509_free(leaf);
        throw Error("loading the test host's certificate");
    }
    X509_free(leaf);
    while (X509* extra = PEM_read_bio_X509(chain.get(), nullptr, nullptr, nullptr)) {
        SSL_CTX_add_extra_chain_cert(ctx.get(), extra);  // takes ownership
    }
    ERR_clear_error();
    std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(
        BIO_new_mem_buf(tls.private_key_pem.data(), static_cast<int>(tls.private_key_pem.size())),
        &BIO_free);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
    if (key == nullptr || SSL_CTX_use_PrivateKey(ctx.get(), key) != 1) {
        EVP_PKEY_free(key);
        throw Error("loading the test host's private key");
    }
    EVP_PKEY_free(key);
    return ctx;
}

// A dual-stack socket bound to [::]:port in the calling thread's namespace.
UniqueFd bind_any(int type, std::uint16_t port) {
    UniqueFd fd(::socket(AF_INET6, type | SOCK_CLOEXEC, 0));
    if (!fd) {
        throw SystemError(errno, "opening a test host socket");
    }
    const int off = 0;
    const int on = 1;
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(port);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        throw SystemError(errno, fmt::format("binding a test host socket to port {}", port));
    }
    if (type == SOCK_STREAM && ::listen(fd.get(), 64) != 0) {
        throw SystemError(errno, fmt::format("listening on test host port {}", port));
    }
    return fd;
}

// Reads and writes of one connection, plain or TLS.
struct Channel {
    int fd = -1;
    SSL* ssl = nullptr;

    long read(char* buffer, std::size_t size) const {
        if (ssl != nullptr) {
            return SSL_read(ssl, buffer, static_cast<int>(size));
        }
        return ::recv(fd, buffer, size, 0);
    }
    void write(const std::string& bytes) const {
        if (ssl != nullptr) {
            SSL_write(ssl, bytes.data(), static_cast<int>(bytes.size()));
        } else {
            ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        }
    }
};

std::string header_value(const std::string& head, std::string_view name) {
    std::size_t at = head.find("\r\n");
    while (at != std::string::npos && at + 2 < head.size()) {
        const std::size_t end = head.find("\r\n", at + 2);
        const std::string line =
            head.substr(at + 2, (end == std::string::npos ? head.size() : end) - at - 2);
        const std::size_t colon = line.find(':');
        if (colon != std::string::npos && colon == name.size() &&
            std::equal(name.begin(), name.end(), line.begin(),
                       [](char a, char b) { return std::tolower(a) == std::tolower(b); })) {
            std::string value = line.substr(colon + 1);
            value.erase(0, value.find_first_not_of(' '));
            return value;
        }
        at = end;
    }
    return {};
}

std::string path_of(const std::string& target) {
    const std::size_t scheme = target.find("://");
    if (scheme == std::string::npos) {
        return target;
    }
    const std::size_t slash = target.find('/', scheme + 3);
    return slash == std::string::npos ? "/" : target.substr(slash);
}

}  // namespace

struct TestHost::Impl {
    std::string label;
    TestHostAddresses addresses;
    TestNetns netns;
    std::optional<VethLink> link;
    SslCtx tls;
    std::vector<std::pair<UniqueFd, std::uint16_t>> tcp_listeners;
    std::vector<UniqueFd> udp_sockets;
    UniqueFd wake{::eventfd(0, EFD_CLOEXEC)};
    std::thread poller;

    std::atomic<int> tcp_connections{0};
    std::atomic<int> tls_handshakes{0};
    std::atomic<int> http_requests{0};
    std::atomic<int> udp_datagrams{0};
    std::atomic<int> silent_connections{0};

    mutable std::mutex mutex;  // guards the fields below
    std::vector<std::string> log;
    std::vector<std::thread> handlers;
    std::vector<int> open_connections;
    bool stopping = false;

    void note(std::string line) {
        std::lock_guard guard(mutex);
        log.push_back(std::move(line));
    }

    void start() {
        netns.run_inside([&] {
            for (const std::uint16_t port : {kHttpPort, kHttpsPort, kAltHttpPort, kDnsPort}) {
                tcp_listeners.emplace_back(bind_any(SOCK_STREAM, port), port);
            }
            udp_sockets.push_back(bind_any(SOCK_DGRAM, kDnsPort));
            udp_sockets.push_back(bind_any(SOCK_DGRAM, kUdpEchoPort));
        });
        poller = std::thread([this] { poll_loop(); });
    }

    void stop() {
        if (poller.joinable()) {
            const std::uint64_t one = 1;
            [[maybe_unused]] const auto written = ::write(wake.get(), &one, sizeof one);
            poller.join();
        }
        std::vector<std::thread> joining;
        {
            std::lock_guard guard(mutex);
            stopping = true;
            for (const int fd : open_connections) {
                ::shutdown(fd, SHUT_RDWR);
            }
            joining.swap(handlers);
        }
        for (auto& handler : joining) {
            handler.join();
        }
    }

    void poll_loop() {
        std::vector<pollfd> fds;
        fds.push_back({wake.get(), POLLIN, 0});
        for (const auto& [fd, port] : tcp_listeners) {
            fds.push_back({fd.get(), POLLIN, 0});
        }
        for (const auto& fd : udp_sockets) {
            fds.push_back({fd.get(), POLLIN, 0});
        }
        for (;;) {
            if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
                return;
            }
            if (fds[0].revents != 0) {
                return;
            }
            for (std::size_t i = 0; i < tcp_listeners.size(); ++i) {
                if (fds[1 + i].revents & POLLIN) {
                    accept_one(tcp_listeners[i].first.get(), tcp_listeners[i].second);
                }
            }
            for (std::size_t i = 0; i < udp_sockets.size(); ++i) {
                if (fds[1 + tcp_listeners.size() + i].revents & POLLIN) {
                    echo_datagram(udp_sockets[i].get());
                }
            }
        }
    }

    // Echoes the datagram back; for DNS that is a well-formed-enough "answer" (the query with the
    // response bit set), so a guest that reached it would see a reply.
    void echo_datagram(int fd) {
        char buffer[2048];
        sockaddr_storage from{};
        socklen_t from_size = sizeof from;
        const ssize_t n = ::recvfrom(fd, buffer, sizeof buffer, MSG_DONTWAIT,
                                     reinterpret_cast<sockaddr*>(&from), &from_size);
        if (n <= 0) {
            return;
        }
        ++udp_datagrams;
        note(fmt::format("udp datagram of {} bytes", n));
        if (n > 2) {
            buffer[2] = static_cast<char>(buffer[2] | 0x80);
        }
        ::sendto(fd, buffer, static_cast<std::size_t>(n), MSG_DONTWAIT,
                 reinterpret_cast<sockaddr*>(&from), from_size);
    }

    void accept_one(int listener, std::uint16_t port) {
        UniqueFd connection(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
        if (!connection) {
            return;
        }
        ++tcp_connections;
        note(fmt::format("tcp connection on port {}", port));
        timeval timeout{kIoTimeoutSeconds, 0};
        ::setsockopt(connection.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        ::setsockopt(connection.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
        std::lock_guard guard(mutex);
        if (stopping) {
            return;
        }
        open_connections.push_back(connection.get());
        handlers.emplace_back([this, fd = connection.release(), port] {
            serve(fd, port);
            {
                std::lock_guard inner(mutex);
                std::erase(open_connections, fd);
            }
            ::close(fd);
        });
    }

    // Answers one request head; false when the connection should close afterwards.
    bool answer(const Channel& channel, const std::string& head, std::uint16_t port,
                const std::string& sni) {
        ++http_requests;
        const std::string request_line = head.substr(0, head.find("\r\n"));
        note(fmt::format("request '{}' on port {}", request_line, port));
        const std::size_t first_space = request_line.find(' ');
        const std::string method = request_line.substr(0, first_space);
        const std::size_t second_space = request_line.find(' ', first_space + 1);
        const std::string target =
            first_space == std::string::npos
                ? std::string()
                : request_line.substr(first_space + 1, second_space - first_space - 1);
        const std::string path = path_of(target);
        const std::string host = header_value(head, "host");
        std::string connection = header_value(head, "connection");
        std::transform(connection.begin(), connection.end(), connection.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        const bool keep_alive = connection != "close" && method != "CONNECT";

        std::string status = "200 OK";
        std::string extra;
        if (method == "CONNECT") {
            status = "405 Method Not Allowed";  // an origin server, not a relay
        } else if (path.starts_with("/redirect/")) {
            status = "302 Found";
            extra = fmt::format("location: http://{}/\r\n", path.substr(10));
        } else if (path.starts_with("/redirect-tls/")) {
            status = "302 Found";
            extra = fmt::format("location: https://{}/\r\n", path.substr(14));
        }
        const std::string body =
            fmt::format("served-by={}\nhost={}\nmethod={}\ntarget={}\nsni={}\nport={}\n", label,
                        host, method, target, sni, port);
        channel.write(fmt::format(
            "HTTP/1.1 {}\r\nx-served-by: {}\r\n{}content-type: text/plain\r\ncontent-length: "
            "{}\r\nconnection: {}\r\n\r\n{}",
            status, label, extra, body.size(), keep_alive ? "keep-alive" : "close", body));
        return keep_alive;
    }

    void serve(int fd, std::uint16_t port) {
        pollfd first{fd, POLLIN, 0};
        char byte = 0;
        if (::poll(&first, 1, kIoTimeoutSeconds * 1000) != 1 ||
            ::recv(fd, &byte, 1, MSG_PEEK) <= 0) {
            ++silent_connections;
            note(fmt::format("connection on port {} closed before sending a byte", port));
            return;
        }
        if (port == kDnsPort) {
            return;  // counted; a TCP DNS client that got this far has already escaped
        }
        Channel channel{fd, nullptr};
        std::unique_ptr<SSL, decltype(&SSL_free)> ssl(nullptr, &SSL_free);
        std::string sni;
        if (port == kHttpsPort) {
            ssl.reset(SSL_new(tls.get()));
            SSL_set_fd(ssl.get(), fd);
            if (SSL_accept(ssl.get()) != 1) {
                note("tls handshake failed");
                return;
            }
            ++tls_handshakes;
            const char* name = SSL_get_servername(ssl.get(), TLSEXT_NAMETYPE_host_name);
            sni = name != nullptr ? name : "";
            note(fmt::format("tls handshake, sni '{}'", sni));
            channel.ssl = ssl.get();
        }
        // Keep-alive unless the client asks to close, so a proxy that keeps reading a client's
        // connection after the first request is exercised, not hidden behind a closing server.
        std::string pending;
        char buffer[4096];
        for (;;) {
            std::size_t end = pending.find("\r\n\r\n");
            while (end == std::string::npos && pending.size() < kMaxHead) {
                const long n = channel.read(buffer, sizeof buffer);
                if (n <= 0) {
                    return;
                }
                pending.append(buffer, static_cast<std::size_t>(n));
                end = pending.find("\r\n\r\n");
            }
            if (end == std::string::npos) {
                return;
            }
            const std::string head = pending.substr(0, end + 4);
            pending.erase(0, end + 4);
            if (!answer(channel, head, port, sni)) {
                break;
            }
        }
        if (ssl) {
            SSL_shutdown(ssl.get());
        }
    }
};

TestHost::TestHost(std::string label, std::string link_name, TestHostAddresses addresses,
                   const net::PemCredentials& tls)
    : impl_(std::make_unique<Impl>()) {
    impl_->label = std::move(label);
    impl_->addresses = std::move(addresses);
    impl_->tls = make_server_context(tls);
    const auto& a = impl_->addresses;
    impl_->link.emplace(impl_->netns, link_name, link_name + "p",
                        LinkAddresses{fmt::format("{}/{}", a.local_ipv4, a.prefix_v4),
                                      fmt::format("{}/{}", a.local_ipv6, a.prefix_v6)},
                        LinkAddresses{fmt::format("{}/{}", a.host_ipv4, a.prefix_v4),
                                      fmt::format("{}/{}", a.host_ipv6, a.prefix_v6)});
    impl_->start();
}

TestHost::~TestHost() {
    impl_->stop();
    impl_->link.reset();
}

const std::string& TestHost::label() const noexcept {
    return impl_->label;
}

const TestHostAddresses& TestHost::addresses() const noexcept {
    return impl_->addresses;
}

HostTraffic TestHost::traffic() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < deadline) {
        {
            std::lock_guard guard(impl_->mutex);
            if (impl_->open_connections.empty()) {
                break;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return {impl_->tcp_connections.load(), impl_->tls_handshakes.load(),
            impl_->http_requests.load(), impl_->udp_datagrams.load(),
            impl_->silent_connections.load()};
}

std::vector<std::string> TestHost::log() const {
    std::lock_guard guard(impl_->mutex);
    return impl_->log;
}

}  // namespace maf_sandbox::egress_testing
