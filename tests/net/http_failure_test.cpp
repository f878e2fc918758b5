#include <fmt/format.h>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>

#include "net_test_support.hpp"

namespace maf_sandbox::net {
namespace {

using namespace std::chrono_literals;
using tcp = boost::asio::ip::tcp;
using testing::run_until_done;
using testing::sleep_for;
using testing::tls_server;
using testing::trusting_client;

class HttpFailures : public ::testing::Test {
  protected:
    boost::asio::io_context io;
};

// A port that nobody listens on: bind, read the port, close.
std::uint16_t closed_port(boost::asio::io_context& io) {
    tcp::acceptor acceptor(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    return acceptor.local_endpoint().port();
}

TEST_F(HttpFailures, RefusedConnectionIsNotSent) {
    HttpClient client(io.get_executor(), trusting_client());
    try {
        run_until_done(
            io, client.send(
                    {"POST", fmt::format("https://127.0.0.1:{}/exec", closed_port(io)), {}, "{}"}));
        FAIL() << "connect to a closed port succeeded";
    } catch (const ConnectFailed& e) {
        EXPECT_EQ(e.phase(), RequestPhase::not_sent);
    }
}

TEST_F(HttpFailures, ConnectionDroppedMidResponseIsSentAndHandlerRan) {
    std::atomic<int> ran = 0;
    HttpServer server(io.get_executor(), tls_server(), [&](HttpRequest) -> Task<HttpResponse> {
        ++ran;
        HttpResponse partial;
        partial.body = R"({"stdout":"half of it","stderr":"","exitCode":0})";
        throw AbortConnection(partial);
        co_return HttpResponse{};
    });
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    try {
        run_until_done(io, client.send({"POST",
                                        fmt::format("https://127.0.0.1:{}/x", port),
                                        {},
                                        R"({"command":"true"})"}));
        FAIL() << "a truncated response was accepted";
    } catch (const ResponseFailed& e) {
        EXPECT_TRUE(e.request_sent());
    }
    EXPECT_EQ(ran, 1);
}

TEST_F(HttpFailures, DeadlineAfterSendingSaysSent) {
    HttpServer server(io.get_executor(), tls_server(), [&](HttpRequest) -> Task<HttpResponse> {
        co_await sleep_for(2s);
        co_return HttpResponse{};
    });
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    const auto start = std::chrono::steady_clock::now();
    try {
        run_until_done(io, client.send({"GET", fmt::format("https://127.0.0.1:{}/", port), {}, {}},
                                       RequestOptions{Seconds(0.2), {}}));
        FAIL() << "the deadline did not fire";
    } catch (const DeadlineExceeded& e) {
        EXPECT_EQ(e.phase(), RequestPhase::sent);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

TEST_F(HttpFailures, DeadlineDuringHandshakeSaysNotSent) {
    // Accepts TCP but never speaks TLS.
    tcp::acceptor silent(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    tcp::socket held(io);
    silent.async_accept(held, [](boost::system::error_code) {});
    HttpClient client(io.get_executor(), trusting_client());
    try {
        run_until_done(
            io, client.send({"POST",
                             fmt::format("https://127.0.0.1:{}/", silent.local_endpoint().port()),
                             {},
                             "x"},
                            RequestOptions{Seconds(0.2), {}}));
        FAIL() << "the deadline did not fire";
    } catch (const DeadlineExceeded& e) {
        EXPECT_EQ(e.phase(), RequestPhase::not_sent);
    }
}

TEST_F(HttpFailures, ResponseOverTheBoundIsRefused) {
    HttpServer server(io.get_executor(), tls_server(), [&](HttpRequest) -> Task<HttpResponse> {
        HttpResponse r;
        r.body = std::string(64 * 1024, 'x');
        co_return r;
    });
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    const auto url = fmt::format("https://127.0.0.1:{}/", port);
    EXPECT_THROW(run_until_done(io, client.send({"GET", url, {}, {}}, RequestOptions{{}, 1024})),
                 ResponseTooLarge);
    // Within the bound the same answer arrives whole.
    const auto r =
        run_until_done(io, client.send({"GET", url, {}, {}}, RequestOptions{{}, 128 * 1024}));
    EXPECT_EQ(r.body.size(), 64u * 1024);
}

TEST_F(HttpFailures, MalformedUrlIsInvalidArgument) {
    HttpClient client(io.get_executor(), trusting_client());
    EXPECT_THROW(run_until_done(io, client.send({"GET", "ftp://x/", {}, {}})), InvalidArgument);
    EXPECT_THROW(run_until_done(io, client.send({"GET", "/relative", {}, {}})), InvalidArgument);
}

TEST(ParseHttpUrl, SplitsSchemeHostPortAndTarget) {
    auto u = parse_http_url("HTTPS://Example.com/a%2Fb?x=1");
    EXPECT_EQ(u.scheme, "https");
    EXPECT_EQ(u.port, 443);
    EXPECT_EQ(u.target, "/a%2Fb?x=1");
    u = parse_http_url("http://[::1]:8080");
    EXPECT_EQ(u.host, "::1");
    EXPECT_EQ(u.port, 8080);
    EXPECT_EQ(u.target, "/");
    EXPECT_EQ(u.authority(), "[::1]:8080");
    EXPECT_THROW(parse_http_url("https://user:pw@host/"), InvalidArgument);
    EXPECT_THROW(parse_http_url("https://host:99999/"), InvalidArgument);
}

TEST(Loopback, RecognisesLoopbackHosts) {
    EXPECT_TRUE(is_loopback_host("localhost"));
    EXPECT_TRUE(is_loopback_host("127.0.0.1"));
    EXPECT_TRUE(is_loopback_host("127.5.0.1"));
    EXPECT_TRUE(is_loopback_host("::1"));
    EXPECT_FALSE(is_loopback_host("10.0.0.1"));
    EXPECT_FALSE(is_loopback_host("example.com"));
}

}  // namespace
}  // namespace maf_sandbox::net
