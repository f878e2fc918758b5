// The egress proxy end to end on loopback: run_egress_proxy in a thread on a listener the test
// made, a hosts file naming the test's own servers, and a plain HTTP and a TLS upstream of its
// own. Clients are plain blocking sockets (and OpenSSL for TLS), so what is tested is the bytes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "maf_sandbox/net/http_server.hpp"
#include "maf_sandbox/net/tls.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {
namespace {

using namespace std::chrono_literals;

constexpr auto kClientTimeout = 5s;
// Larger than the relay's copy buffer, so bulk transfers take the splice path.
constexpr std::size_t kBigBody = 3 * 1024 * 1024 + 17;

UniqueFd listen_on_loopback(std::uint16_t& port) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (!fd || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(fd.get(), 64) != 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        throw std::runtime_error("cannot listen on loopback");
    }
    port = ntohs(address.sin_port);
    return fd;
}

UniqueFd connect_to(std::uint16_t port) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    timeval timeout{static_cast<time_t>(kClientTimeout.count()), 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        return UniqueFd();
    }
    return fd;
}

void send_all(int fd, std::string_view data) {
    while (!data.empty()) {
        const auto n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (n <= 0) {
            return;  // the proxy closed on us: the caller checks what came back
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
}

std::string read_all(int fd) {
    std::string out;
    char buffer[16384];
    while (true) {
        const auto n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n <= 0) {
            return out;
        }
        out.append(buffer, static_cast<std::size_t>(n));
    }
}

std::string read_head(int fd) {
    std::string out;
    char c = 0;
    while (out.find("\r\n\r\n") == std::string::npos && ::recv(fd, &c, 1, 0) == 1) {
        out += c;
    }
    return out;
}

std::string exchange(std::uint16_t port, std::string_view request) {
    auto fd = connect_to(port);
    send_all(fd.get(), request);
    return read_all(fd.get());
}

std::string deny_reason(const std::string& response) {
    const std::string field = "x-deny-reason: ";
    const auto at = response.find(field);
    if (!response.starts_with("HTTP/1.1 403 ") || at == std::string::npos) {
        return "(no 403 with x-deny-reason in: " + response.substr(0, 200) + ")";
    }
    return response.substr(at + field.size(), response.find("\r\n", at) - at - field.size());
}

// A TLS exchange over an established tunnel: OpenSSL client, `server_name` as SNI (none when
// null), no certificate verification (the tunnel is what is under test). Nothing when the
// handshake fails.
std::optional<std::string> tls_get(int fd, const char* server_name,
                                   std::string_view path = "/tls") {
    std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_client_method()),
                                                              SSL_CTX_free);
    SSL_CTX_set_verify(context.get(), SSL_VERIFY_NONE, nullptr);
    std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(context.get()), SSL_free);
    SSL_set_fd(ssl.get(), fd);
    if (server_name) {
        SSL_set_tlsext_host_name(ssl.get(), server_name);
    }
    if (SSL_connect(ssl.get()) != 1) {
        return std::nullopt;
    }
    const std::string request =
        "GET " + std::string(path) + " HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n";
    SSL_write(ssl.get(), request.data(), static_cast<int>(request.size()));
    std::string out;
    char buffer[16384];
    int n = 0;
    while ((n = SSL_read(ssl.get(), buffer, sizeof buffer)) > 0) {
        out.append(buffer, static_cast<std::size_t>(n));
    }
    return out;
}

// run_egress_proxy on its own thread; the destructor closes the lifetime pipe and joins.
class RunningProxy {
  public:
    explicit RunningProxy(EgressProxyOptions options) : options_(std::move(options)) {
        auto listener = listen_on_loopback(port_);
        int pipe_fds[2];
        if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
            throw std::runtime_error("pipe2 failed");
        }
        lifetime_read_.reset(pipe_fds[0]);
        lifetime_write_.reset(pipe_fds[1]);
        const int listener_fd = listener.release();
        thread_ = std::thread([this, listener_fd] {
            status_.set_value(run_egress_proxy(listener_fd, lifetime_read_.get(), options_));
        });
        exited_ = status_.get_future();
    }
    ~RunningProxy() { stop(); }
    RunningProxy(const RunningProxy&) = delete;
    RunningProxy& operator=(const RunningProxy&) = delete;

    std::uint16_t port() const { return port_; }
    // Closes the lifetime pipe; returns the proxy's exit status, or -1 when it did not exit.
    int stop() {
        lifetime_write_.reset();
        if (!thread_.joinable()) {
            return last_status_;
        }
        if (exited_.wait_for(5s) != std::future_status::ready) {
            ADD_FAILURE() << "the proxy did not exit when its lifetime descriptor hung up";
            thread_.detach();  // cannot happen unless the proxy is broken; never block the suite
            return -1;
        }
        thread_.join();
        last_status_ = exited_.get();
        return last_status_;
    }

  private:
    EgressProxyOptions options_;
    std::uint16_t port_ = 0;
    UniqueFd lifetime_read_;
    UniqueFd lifetime_write_;
    std::promise<int> status_;
    std::future<int> exited_;
    std::thread thread_;
    int last_status_ = -1;
};

class EgressProxyEndToEnd : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/maf-egress-proxy-XXXXXX";
        ASSERT_NE(::mkdtemp(pattern), nullptr);
        dir_ = pattern;
        {
            std::ofstream hosts(dir_ / "hosts");
            hosts << "# the test's own names\n127.0.0.1 allowed.test denied.test other.test\n";
        }
        const auto handler = [this](net::HttpRequest request) -> Task<net::HttpResponse> {
            ++upstream_requests_;
            net::HttpResponse response;
            if (request.target == "/big") {
                response.body = std::string(kBigBody, 'b');
                co_return response;
            }
            if (request.target == "/redirect") {
                response.status = 302;
                response.headers.add("Location", "http://denied.test/");
                co_return response;
            }
            response.headers.add("Content-Type", "text/plain");
            response.body = "upstream host=" + request.headers.get("host").value_or("-") +
                            " path=" + request.target + " proxy-auth=" +
                            (request.headers.contains("proxy-authorization") ? "yes" : "no") +
                            " body=" + request.body;
            co_return response;
        };
        net::HttpServerOptions plain;
        http_ = std::make_unique<net::HttpServer>(io_.get_executor(), plain, handler);
        http_port_ = http_->start();
        net::HttpServerOptions tls;
        tls.tls = net::generate_self_signed({"allowed.test", "other.test"}, {}).server;
        https_ = std::make_unique<net::HttpServer>(io_.get_executor(), tls, handler);
        https_port_ = https_->start();
        io_thread_ = std::thread([this] {
            auto guard = boost::asio::make_work_guard(io_);
            io_.run();
        });
    }

    void TearDown() override {
        proxy_.reset();
        io_.stop();
        if (io_thread_.joinable()) {
            io_thread_.join();
        }
        http_.reset();
        https_.reset();
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
    }

    EgressProxyOptions options(bool allow_private = true) {
        EgressProxyOptions options;
        options.rules = compile_allowlist({"allowed.test:" + std::to_string(http_port_),
                                           "allowed.test:" + std::to_string(https_port_),
                                           "other.test:" + std::to_string(https_port_)});
        options.operator_options.hosts_file = dir_ / "hosts";
        options.operator_options.allow_private = allow_private;
        options.decision_log = dir_ / "decisions.jsonl";
        options.connect_timeout = 3s;
        options.header_timeout = 3s;
        return options;
    }

    RunningProxy& start(EgressProxyOptions o) {
        proxy_ = std::make_unique<RunningProxy>(std::move(o));
        return *proxy_;
    }

    std::string get(std::string_view host, std::uint16_t port, std::string_view path = "/",
                    std::string_view extra = "") {
        const auto authority = std::string(host) + ":" + std::to_string(port);
        return exchange(proxy_->port(), "GET http://" + authority + std::string(path) +
                                            " HTTP/1.1\r\nHost: " + authority + "\r\n" +
                                            std::string(extra) + "\r\n");
    }

    // CONNECT, and the proxy's answer head.
    std::pair<UniqueFd, std::string> connect(std::string_view authority) {
        auto fd = connect_to(proxy_->port());
        send_all(fd.get(), "CONNECT " + std::string(authority) +
                               " HTTP/1.1\r\nHost: " + std::string(authority) + "\r\n\r\n");
        auto head = read_head(fd.get());
        return {std::move(fd), head};
    }

    std::vector<EgressDecision> decisions() const {
        return read_egress_decisions(dir_ / "decisions.jsonl");
    }

    std::string tls_authority(std::string_view host) const {
        return std::string(host) + ":" + std::to_string(https_port_);
    }

    std::filesystem::path dir_;
    boost::asio::io_context io_;
    std::unique_ptr<net::HttpServer> http_;
    std::unique_ptr<net::HttpServer> https_;
    std::uint16_t http_port_ = 0;
    std::uint16_t https_port_ = 0;
    std::thread io_thread_;
    std::atomic<int> upstream_requests_ = 0;
    std::unique_ptr<RunningProxy> proxy_;
};

TEST_F(EgressProxyEndToEnd, AllowedGetIsForwardedWithoutProxyFields) {
    start(options());
    const auto response =
        get("allowed.test", http_port_, "/hello?x=1", "Proxy-Authorization: Basic c2VjcmV0\r\n");
    EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
    EXPECT_NE(response.find("Connection: close"), std::string::npos) << response;
    EXPECT_NE(response.find("upstream host=allowed.test:" + std::to_string(http_port_) +
                            " path=/hello?x=1 proxy-auth=no"),
              std::string::npos)
        << response;
    const auto log = decisions();
    ASSERT_EQ(log.size(), 1u);
    EXPECT_TRUE(log[0].allowed);
    EXPECT_EQ(log[0].method, "GET");
    EXPECT_EQ(log[0].host, "allowed.test");
    EXPECT_EQ(log[0].port, http_port_);
}

TEST_F(EgressProxyEndToEnd, RequestBodiesAreForwardedByLengthAndChunked) {
    start(options());
    const auto authority = "allowed.test:" + std::to_string(http_port_);
    const auto sized =
        exchange(proxy_->port(), "POST http://" + authority + "/p HTTP/1.1\r\nHost: " + authority +
                                     "\r\nContent-Length: 5\r\n\r\nhello");
    EXPECT_NE(sized.find("body=hello"), std::string::npos) << sized;
    const auto chunked = exchange(
        proxy_->port(),
        "POST http://" + authority + "/p HTTP/1.1\r\nHost: " + authority +
            "\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
    EXPECT_NE(chunked.find("body=abcde"), std::string::npos) << chunked;
}

TEST_F(EgressProxyEndToEnd, APipelinedSecondRequestNeverReachesTheUpstream) {
    start(options());
    const auto authority = "allowed.test:" + std::to_string(http_port_);
    const auto response = exchange(
        proxy_->port(), "GET http://" + authority + "/first HTTP/1.1\r\nHost: " + authority +
                            "\r\n\r\nGET /second HTTP/1.1\r\nHost: denied.test\r\n\r\n");
    EXPECT_NE(response.find("path=/first"), std::string::npos) << response;
    EXPECT_EQ(response.find("path=/second"), std::string::npos) << response;
    EXPECT_EQ(upstream_requests_.load(), 1);
}

TEST_F(EgressProxyEndToEnd, DeniedHostIsRefusedWith403AndReason) {
    start(options());
    EXPECT_EQ(deny_reason(get("denied.test", http_port_)), "host not in allowlist");
    EXPECT_EQ(deny_reason(connect(tls_authority("denied.test")).second), "host not in allowlist");
    EXPECT_EQ(upstream_requests_.load(), 0);
}

TEST_F(EgressProxyEndToEnd, HostHeaderThatDisagreesWithTheUrlIsRefused) {
    start(options());
    const auto authority = "allowed.test:" + std::to_string(http_port_);
    const auto response = exchange(
        proxy_->port(), "GET http://" + authority + "/ HTTP/1.1\r\nHost: denied.test\r\n\r\n");
    EXPECT_EQ(deny_reason(response), "host header mismatch");
    const auto two =
        exchange(proxy_->port(), "GET http://" + authority + "/ HTTP/1.1\r\nHost: " + authority +
                                     "\r\nHost: denied.test\r\n\r\n");
    EXPECT_EQ(deny_reason(two), "multiple host headers");
    EXPECT_EQ(upstream_requests_.load(), 0);
}

TEST_F(EgressProxyEndToEnd, RedirectIsRelayedNeverFollowed) {
    start(options());
    const auto response = get("allowed.test", http_port_, "/redirect");
    EXPECT_TRUE(response.starts_with("HTTP/1.1 302")) << response;
    EXPECT_NE(response.find("Location: http://denied.test/"), std::string::npos);
    EXPECT_EQ(upstream_requests_.load(), 1);
    const auto log = decisions();
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0].host, "allowed.test");
}

TEST_F(EgressProxyEndToEnd, ConnectWithMatchingSniPassesBytes) {
    start(options());
    auto [fd, head] = connect(tls_authority("allowed.test"));
    ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
    const auto response = tls_get(fd.get(), "Allowed.Test");
    ASSERT_TRUE(response) << "the TLS handshake through the tunnel failed";
    EXPECT_NE(response->find("path=/tls"), std::string::npos) << *response;
    const auto log = decisions();
    ASSERT_EQ(log.size(), 1u);
    EXPECT_TRUE(log[0].allowed);
    EXPECT_EQ(log[0].method, "CONNECT");
}

TEST_F(EgressProxyEndToEnd, ConnectHostAndSniCompareIgnoringCaseAndOneTrailingDot) {
    start(options());
    auto [fd, head] = connect("ALLOWED.test.:" + std::to_string(https_port_));
    ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
    const auto response = tls_get(fd.get(), "allowed.TEST");
    ASSERT_TRUE(response) << "the TLS handshake through the tunnel failed";
    EXPECT_NE(response->find("path=/tls"), std::string::npos) << *response;
}

TEST_F(EgressProxyEndToEnd, BulkResponsesArriveWholeThroughForwardingAndTunnels) {
    start(options());
    const auto forwarded = get("allowed.test", http_port_, "/big");
    ASSERT_TRUE(forwarded.starts_with("HTTP/1.1 200")) << forwarded.substr(0, 200);
    EXPECT_TRUE(forwarded.ends_with("\r\n\r\n" + std::string(kBigBody, 'b')));
    auto [fd, head] = connect(tls_authority("allowed.test"));
    ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
    const auto tunnelled = tls_get(fd.get(), "allowed.test", "/big");
    ASSERT_TRUE(tunnelled);
    EXPECT_TRUE(tunnelled->ends_with("\r\n\r\n" + std::string(kBigBody, 'b')));
}

TEST_F(EgressProxyEndToEnd, ConnectWithAnotherSniIsClosed) {
    start(options());
    auto [fd, head] = connect(tls_authority("allowed.test"));
    ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
    EXPECT_FALSE(tls_get(fd.get(), "other.test"));  // allowed itself, but not what CONNECT named
    const auto log = decisions();
    ASSERT_EQ(log.size(), 1u);
    EXPECT_FALSE(log[0].allowed);
    EXPECT_EQ(log[0].reason, "sni mismatch");
    EXPECT_EQ(upstream_requests_.load(), 0);
}

TEST_F(EgressProxyEndToEnd, ConnectWithoutSniIsClosed) {
    start(options());
    auto [fd, head] = connect(tls_authority("allowed.test"));
    ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
    EXPECT_FALSE(tls_get(fd.get(), nullptr));
    const auto log = decisions();
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0].reason, "missing sni");
}

TEST_F(EgressProxyEndToEnd, PlainTextInsideATunnelIsClosed) {
    start(options());
    auto [fd, head] = connect(tls_authority("allowed.test"));
    ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
    send_all(fd.get(), "CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n");
    EXPECT_EQ(read_all(fd.get()), "");
    const auto log = decisions();
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0].reason, "tunnel payload is not tls");
}

TEST_F(EgressProxyEndToEnd, DeniedPortAndIpLiteralsAreRefused) {
    start(options());
    EXPECT_EQ(deny_reason(connect("allowed.test:9").second), "port not allowed");
    EXPECT_EQ(deny_reason(connect("127.0.0.1:" + std::to_string(https_port_)).second),
              "ip literal");
    EXPECT_EQ(deny_reason(connect("[::1]:" + std::to_string(https_port_)).second), "ip literal");
    EXPECT_EQ(deny_reason(get("127.0.0.1", http_port_)), "ip literal");
    EXPECT_EQ(deny_reason(connect("allowed.test").second), "connect target has no port");
}

TEST_F(EgressProxyEndToEnd, LoopbackTargetIsRefusedWithoutAllowPrivate) {
    start(options(false));
    EXPECT_EQ(deny_reason(get("allowed.test", http_port_)), "address is loopback");
    EXPECT_EQ(deny_reason(connect(tls_authority("allowed.test")).second), "address is loopback");
    EXPECT_EQ(upstream_requests_.load(), 0);
}

TEST_F(EgressProxyEndToEnd, MalformedAndOversizedHeadsAreRefused) {
    start(options());
    EXPECT_EQ(deny_reason(exchange(proxy_->port(), "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")),
              "not a proxy request");
    EXPECT_EQ(deny_reason(exchange(proxy_->port(), "GET http://allowed.test/ HTTP/1.1\r\n" +
                                                       std::string(20000, 'a') + "\r\n\r\n")),
              "request head too large");
}

TEST_F(EgressProxyEndToEnd, DecisionLogHoldsEveryDecision) {
    start(options());
    get("allowed.test", http_port_);
    get("denied.test", http_port_);
    connect(tls_authority("denied.test"));
    connect("allowed.test:9");
    {
        auto [fd, head] = connect(tls_authority("allowed.test"));
        tls_get(fd.get(), "other.test");
    }
    const auto log = decisions();
    ASSERT_EQ(log.size(), 5u);
    EXPECT_TRUE(log[0].allowed);
    EXPECT_EQ(log[1].reason, "host not in allowlist");
    EXPECT_EQ(log[1].method, "GET");
    EXPECT_EQ(log[2].reason, "host not in allowlist");
    EXPECT_EQ(log[2].method, "CONNECT");
    EXPECT_EQ(log[3].reason, "port not allowed");
    EXPECT_EQ(log[3].port, 9);
    EXPECT_EQ(log[4].reason, "sni mismatch");
    for (const auto& decision : log) {
        EXPECT_LT(std::chrono::system_clock::now() - decision.time, 60s);
    }
}

TEST_F(EgressProxyEndToEnd, SilentGuestIsClosedAfterTheHeaderTimeout) {
    auto o = options();
    o.header_timeout = 300ms;
    start(std::move(o));
    auto fd = connect_to(proxy_->port());
    const auto started = std::chrono::steady_clock::now();
    EXPECT_EQ(read_all(fd.get()), "");
    EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
}

TEST_F(EgressProxyEndToEnd, ConnectionsOverTheSessionLimitAreClosed) {
    auto o = options();
    o.max_sessions = 1;
    start(std::move(o));
    auto first = connect_to(proxy_->port());
    send_all(first.get(), "GET http://allowed.test");  // an unfinished head holds the session
    std::this_thread::sleep_for(100ms);
    auto second = connect_to(proxy_->port());
    EXPECT_EQ(read_all(second.get()), "");
    first.reset();
    // The proxy frees the slot once it sees the close; allow it a moment on a busy machine.
    std::string response;
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    while (!response.starts_with("HTTP/1.1 200") && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(20ms);
        response = get("allowed.test", http_port_);
    }
    EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
}

TEST_F(EgressProxyEndToEnd, IdleTunnelIsClosed) {
    auto o = options();
    o.idle_timeout = 300ms;
    start(std::move(o));
    auto [fd, head] = connect(tls_authority("allowed.test"));
    ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
    // A real ClientHello, then silence: the server answers once and both sides wait.
    SSL_CTX* context = SSL_CTX_new(TLS_client_method());
    SSL* ssl = SSL_new(context);
    BIO* in = BIO_new(BIO_s_mem());
    BIO* out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, in, out);
    SSL_set_tlsext_host_name(ssl, "allowed.test");
    SSL_connect(ssl);
    std::string hello(static_cast<std::size_t>(BIO_ctrl_pending(out)), '\0');
    BIO_read(out, hello.data(), static_cast<int>(hello.size()));
    SSL_free(ssl);
    SSL_CTX_free(context);
    send_all(fd.get(), hello);
    const auto started = std::chrono::steady_clock::now();
    const auto answer = read_all(fd.get());
    EXPECT_FALSE(answer.empty());  // the server's first flight came through
    EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
    EXPECT_TRUE(decisions().at(0).allowed);
}

TEST_F(EgressProxyEndToEnd, UnreachableAllowedHostAnswers502AndIsLoggedAsNotAllowed) {
    // Bound and never listening: connects are refused, and while the socket is held no other
    // socket (nor a connect's ephemeral port) can take the port.
    UniqueFd bound(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    ASSERT_EQ(::bind(bound.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::getsockname(bound.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
    const std::uint16_t closed = ntohs(address.sin_port);
    auto o = options();
    o.rules.push_back(compile_allowlist({"allowed.test:" + std::to_string(closed)}).at(0));
    start(std::move(o));
    const auto response = get("allowed.test", closed);
    EXPECT_TRUE(response.starts_with("HTTP/1.1 502 Bad Gateway")) << response;
    const auto log = decisions();
    ASSERT_EQ(log.size(), 1u);
    EXPECT_FALSE(log[0].allowed);
    EXPECT_EQ(log[0].reason, "the host refused the connection");
}

TEST_F(EgressProxyEndToEnd, RefusedRequestWithABodyStillReadsThe403) {
    start(options());
    const auto authority = "denied.test:" + std::to_string(http_port_);
    const std::string body(200000, 'x');
    const auto response =
        exchange(proxy_->port(), "POST http://" + authority + "/ HTTP/1.1\r\nHost: " + authority +
                                     "\r\nContent-Length: " + std::to_string(body.size()) +
                                     "\r\n\r\n" + body);
    EXPECT_EQ(deny_reason(response), "host not in allowlist");
}

TEST_F(EgressProxyEndToEnd, LifetimeHangupStopsTheProxyAndClosesTheListener) {
    auto& proxy = start(options());
    const auto port = proxy.port();
    EXPECT_TRUE(get("allowed.test", http_port_).starts_with("HTTP/1.1 200"));
    EXPECT_EQ(proxy.stop(), 0);
    EXPECT_FALSE(connect_to(port));  // nothing listens: the guest's connects are refused
}

TEST(EgressProxy, UnusableDecisionLogFailsClosed) {
    std::uint16_t port = 0;
    auto listener = listen_on_loopback(port);
    int pipe_fds[2];
    ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
    UniqueFd read_end(pipe_fds[0]);
    UniqueFd write_end(pipe_fds[1]);
    EgressProxyOptions options;
    options.decision_log = "/nonexistent-dir/decisions.jsonl";
    EXPECT_NE(run_egress_proxy(listener.release(), read_end.get(), options), 0);
    EXPECT_FALSE(connect_to(port));
}

}  // namespace
}  // namespace maf_sandbox::runtime
