#include <fmt/format.h>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include "net_test_support.hpp"

namespace maf_sandbox::net {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;
using tcp = asio::ip::tcp;
using testing::run_until_done;
using testing::tls_server;
using testing::trusting_client;

// A tiny CONNECT proxy: records each request head, then tunnels every authority to one upstream
// loopback port (so a made-up host name can reach the test server), or refuses with 407.
class TestProxy {
  public:
    TestProxy(asio::io_context& io, std::uint16_t upstream_port, bool refuse = false)
        : io_(io),
          acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
          upstream_port_(upstream_port),
          refuse_(refuse) {
        asio::co_spawn(io, accept_loop(), asio::detached);
    }
    std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
    const std::vector<std::string>& heads() const { return heads_; }

  private:
    Task<void> accept_loop() {
        for (;;) {
            auto socket = co_await acceptor_.async_accept(asio::use_awaitable);
            asio::co_spawn(io_, session(std::move(socket)), asio::detached);
        }
    }

    static Task<void> pipe(tcp::socket& from, tcp::socket& to) {
        char data[16384];
        for (;;) {
            const auto n = co_await from.async_read_some(asio::buffer(data), asio::use_awaitable);
            co_await asio::async_write(to, asio::buffer(data, n), asio::use_awaitable);
        }
    }

    Task<void> session(tcp::socket client) {
        asio::streambuf buffer;
        const auto n =
            co_await asio::async_read_until(client, buffer, "\r\n\r\n", asio::use_awaitable);
        std::string head(asio::buffers_begin(buffer.data()),
                         asio::buffers_begin(buffer.data()) + static_cast<std::ptrdiff_t>(n));
        heads_.push_back(head);
        if (refuse_) {
            co_await asio::async_write(
                client,
                asio::buffer(std::string_view(
                    "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")),
                asio::use_awaitable);
            co_return;
        }
        tcp::socket upstream(io_);
        co_await upstream.async_connect(
            tcp::endpoint(asio::ip::make_address("127.0.0.1"), upstream_port_),
            asio::use_awaitable);
        co_await asio::async_write(
            client, asio::buffer(std::string_view("HTTP/1.1 200 Connection established\r\n\r\n")),
            asio::use_awaitable);
        try {
            co_await (pipe(client, upstream) || pipe(upstream, client));
        } catch (const std::exception&) {
        }
    }

    asio::io_context& io_;
    tcp::acceptor acceptor_;
    std::uint16_t upstream_port_;
    bool refuse_;
    std::vector<std::string> heads_;
};

Task<HttpResponse> hello(HttpRequest request) {
    HttpResponse r;
    r.body = "hello " + request.headers.get("host").value_or("?");
    co_return r;
}

class ProxyTunnel : public ::testing::Test {
  protected:
    asio::io_context io;
};

TEST_F(ProxyTunnel, HttpsGoesThroughConnectWithCredentials) {
    HttpServer server(io.get_executor(), tls_server(), hello);
    const auto port = server.start();
    TestProxy proxy(io, port);
    auto options = trusting_client();
    options.proxy =
        ProxySettings{fmt::format("http://alice:s3cret@127.0.0.1:{}", proxy.port()), ""};
    HttpClient client(io.get_executor(), options);
    const auto r = run_until_done(io, client.send({"GET", "https://emulator.test:8443/x", {}, {}}));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "hello emulator.test:8443");
    ASSERT_EQ(proxy.heads().size(), 1u);
    EXPECT_TRUE(proxy.heads()[0].starts_with("CONNECT emulator.test:8443 HTTP/1.1\r\n"))
        << proxy.heads()[0];
    // base64("alice:s3cret")
    EXPECT_NE(proxy.heads()[0].find("Proxy-Authorization: Basic YWxpY2U6czNjcmV0"),
              std::string::npos)
        << proxy.heads()[0];
    // The tunnelled connection is pooled like any other.
    run_until_done(io, client.send({"GET", "https://emulator.test:8443/y", {}, {}}));
    EXPECT_EQ(proxy.heads().size(), 1u);
}

TEST_F(ProxyTunnel, RefusedTunnelIsNotSent) {
    HttpServer server(io.get_executor(), tls_server(), hello);
    TestProxy proxy(io, server.start(), /*refuse=*/true);
    auto options = trusting_client();
    options.proxy = ProxySettings{fmt::format("127.0.0.1:{}", proxy.port()), ""};
    HttpClient client(io.get_executor(), options);
    try {
        run_until_done(io, client.send({"POST", "https://emulator.test/", {}, "x"}));
        FAIL() << "a refused tunnel carried the request";
    } catch (const ConnectFailed& e) {
        EXPECT_FALSE(e.request_sent());
        EXPECT_NE(std::string(e.what()).find("407"), std::string::npos);
    }
}

TEST_F(ProxyTunnel, LoopbackAndNoProxyHostsBypassTheProxy) {
    HttpServer server(io.get_executor(), tls_server(), hello);
    const auto port = server.start();
    TestProxy proxy(io, port);
    auto options = trusting_client();
    options.proxy = ProxySettings{fmt::format("http://127.0.0.1:{}", proxy.port()), ""};
    HttpClient client(io.get_executor(), options);
    run_until_done(io, client.send({"GET", fmt::format("https://127.0.0.1:{}/", port), {}, {}}));
    run_until_done(io, client.send({"GET", fmt::format("https://localhost:{}/", port), {}, {}}));
    EXPECT_TRUE(proxy.heads().empty());
}

TEST(ProxySettingsTest, NoProxyEntriesMatchHostsAndSubdomains) {
    ProxySettings s{"http://proxy:3128", "example.com, .internal.test,10.1.2.3,other:8443"};
    EXPECT_TRUE(s.applies_to("management.eastus2.azuredevcompute.io"));
    EXPECT_FALSE(s.applies_to("example.com"));
    EXPECT_FALSE(s.applies_to("api.EXAMPLE.com"));
    EXPECT_TRUE(s.applies_to("notexample.com"));
    EXPECT_FALSE(s.applies_to("a.internal.test"));
    EXPECT_FALSE(s.applies_to("10.1.2.3"));
    EXPECT_FALSE(s.applies_to("other"));
    EXPECT_FALSE(s.applies_to("127.0.0.1"));
    EXPECT_FALSE(s.applies_to("localhost"));
    EXPECT_FALSE((ProxySettings{"http://p:1", "*"}.applies_to("anything.example")));
    EXPECT_FALSE((ProxySettings{"", ""}.applies_to("anything.example")));
}

}  // namespace
}  // namespace maf_sandbox::net
