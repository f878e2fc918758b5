#include <fmt/format.h>
#include <atomic>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include "net_test_support.hpp"

namespace maf_sandbox::net {
namespace {

using namespace std::chrono_literals;
using testing::run_until_done;
using testing::sleep_for;
using testing::tls_server;
using testing::trusting_client;

Task<HttpResponse> echo(HttpRequest request) {
    HttpResponse response;
    response.headers.set("Content-Type", "text/plain");
    response.headers.set("X-Method", request.method);
    response.headers.set("X-Target", request.target);
    response.headers.set("X-Test", request.headers.get("x-test").value_or(""));
    response.body = request.body;
    co_return response;
}

class HttpRoundTrip : public ::testing::Test {
  protected:
    boost::asio::io_context io;
};

TEST_F(HttpRoundTrip, TlsRequestReachesHandlerAndAnswerComesBackVerbatim) {
    HttpServer server(io.get_executor(), tls_server(), echo);
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    HttpRequest request;
    request.method = "PUT";
    request.target = fmt::format("https://127.0.0.1:{}/a/b%20c?x=1&y=%2F", port);
    request.headers.set("X-Test", "yes");
    request.body = std::string("bytes\0with nul", 14);
    const auto response = run_until_done(io, client.send(request));
    EXPECT_EQ(response.status, 200);
    EXPECT_EQ(response.body, request.body);
    EXPECT_EQ(response.headers.get("x-method"), "PUT");
    EXPECT_EQ(response.headers.get("X-TARGET"), "/a/b%20c?x=1&y=%2F");
    EXPECT_EQ(response.headers.get("x-test"), "yes");
    EXPECT_TRUE(server.tls());
}

TEST_F(HttpRoundTrip, LocalhostNameIsVerifiedThroughSni) {
    HttpServer server(io.get_executor(), tls_server(), echo);
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    const auto response = run_until_done(
        io, client.send({"GET", fmt::format("https://localhost:{}/", port), {}, {}}));
    EXPECT_EQ(response.status, 200);
}

TEST_F(HttpRoundTrip, PlainHttpWorksForTests) {
    HttpServer server(io.get_executor(), HttpServerOptions{}, echo);
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    const auto response = run_until_done(
        io, client.send({"POST", fmt::format("http://127.0.0.1:{}/p", port), {}, "hi"}));
    EXPECT_EQ(response.body, "hi");
    EXPECT_FALSE(server.tls());
}

TEST_F(HttpRoundTrip, UntrustedCertificateIsRefusedBeforeSending) {
    std::atomic<int> calls = 0;
    HttpServer server(io.get_executor(), tls_server(), [&](HttpRequest r) {
        ++calls;
        return echo(std::move(r));
    });
    const auto port = server.start();
    HttpClientOptions options;
    options.use_system_store = true;  // the system store does not know our CA
    options.proxy = ProxySettings{};
    HttpClient client(io.get_executor(), options);
    try {
        run_until_done(io,
                       client.send({"POST", fmt::format("https://127.0.0.1:{}/", port), {}, "x"}));
        FAIL() << "an unknown CA was trusted";
    } catch (const TlsVerificationFailed& e) {
        // Named for what it is, in OpenSSL's words, never as a network failure.
        EXPECT_FALSE(e.request_sent());
        EXPECT_EQ(e.problem(), "self-signed certificate in certificate chain") << e.what();
        EXPECT_NE(std::string(e.what()).find("TLS certificate of 127.0.0.1:"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("not retried"), std::string::npos) << e.what();
    }
    EXPECT_EQ(calls, 0);
}

TEST_F(HttpRoundTrip, CertificateForAnotherNameIsRefused) {
    auto options = tls_server();
    const auto other = generate_self_signed({"other.invalid"}, {});
    options.tls = other.server;
    HttpServer server(io.get_executor(), options, echo);
    const auto port = server.start();
    auto client_options = trusting_client();
    client_options.ca_pem = other.ca_certificate_pem;
    HttpClient client(io.get_executor(), client_options);
    try {
        run_until_done(io,
                       client.send({"GET", fmt::format("https://127.0.0.1:{}/", port), {}, {}}));
        FAIL() << "a certificate for another name was accepted";
    } catch (const TlsVerificationFailed& e) {
        EXPECT_EQ(e.problem(), "the certificate does not name 127.0.0.1") << e.what();
    }
}

TEST_F(HttpRoundTrip, CaFileIsTrusted) {
    const auto dir =
        std::filesystem::temp_directory_path() / fmt::format("maf-net-ca-{}", ::getpid());
    std::filesystem::create_directories(dir);
    write_file_atomically(dir / "ca.pem", testing::test_authority().ca_certificate_pem);
    HttpServer server(io.get_executor(), tls_server(), echo);
    const auto port = server.start();
    HttpClientOptions options;
    options.ca_file = (dir / "ca.pem").string();
    options.proxy = ProxySettings{};
    HttpClient client(io.get_executor(), options);
    const auto response = run_until_done(
        io, client.send({"GET", fmt::format("https://127.0.0.1:{}/", port), {}, {}}));
    EXPECT_EQ(response.status, 200);
    std::filesystem::remove_all(dir);
}

TEST_F(HttpRoundTrip, MissingCaFileIsAnInvalidArgument) {
    HttpClientOptions options;
    options.ca_file = "/nonexistent/ca.pem";
    EXPECT_THROW(HttpClient(io.get_executor(), options), InvalidArgument);
}

TEST_F(HttpRoundTrip, KeepAliveReusesOneConnection) {
    HttpServer server(io.get_executor(), tls_server(), echo);
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    run_until_done(io, [&]() -> Task<void> {
        for (int i = 0; i < 5; ++i) {
            HttpRequest request{"GET", fmt::format("https://127.0.0.1:{}/{}", port, i), {}, {}};
            const auto r = co_await client.send(std::move(request));
            EXPECT_EQ(r.headers.get("x-target"), fmt::format("/{}", i));
        }
    }());
    EXPECT_EQ(client.stats().connections_opened, 1u);
    EXPECT_EQ(client.stats().reused, 4u);
}

TEST_F(HttpRoundTrip, ConnectionClosedByServerWhileIdleIsReplaced) {
    auto options = tls_server();
    options.idle_timeout = Seconds(0.1);
    HttpServer server(io.get_executor(), options, echo);
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    run_until_done(io, [&]() -> Task<void> {
        const auto url = fmt::format("https://127.0.0.1:{}/", port);
        HttpRequest first{"POST", url, {}, "1"};
        EXPECT_EQ((co_await client.send(std::move(first))).body, "1");
        co_await sleep_for(400ms);
        HttpRequest second{"POST", url, {}, "2"};
        EXPECT_EQ((co_await client.send(std::move(second))).body, "2");
    }());
    EXPECT_EQ(client.stats().connections_opened, 2u);
}

TEST_F(HttpRoundTrip, ServerAnswersConcurrentConnectionsConcurrently) {
    std::atomic<int> active = 0;
    std::atomic<int> peak = 0;
    HttpServer server(io.get_executor(), tls_server(), [&](HttpRequest r) -> Task<HttpResponse> {
        peak = std::max(peak.load(), ++active);
        co_await sleep_for(100ms);
        --active;
        co_return co_await echo(std::move(r));
    });
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    int done = 0;
    for (int i = 0; i < 6; ++i) {
        boost::asio::co_spawn(
            io,
            [&]() -> Task<void> {
                HttpRequest request{"GET", fmt::format("https://127.0.0.1:{}/", port), {}, {}};
                auto r = co_await client.send(std::move(request));
                EXPECT_EQ(r.status, 200);
                ++done;
            },
            boost::asio::detached);
    }
    const auto start = std::chrono::steady_clock::now();
    while (done < 6 && std::chrono::steady_clock::now() - start < 5s) {
        io.run_one_for(100ms);
    }
    EXPECT_EQ(done, 6);
    EXPECT_GE(peak.load(), 2);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 550ms);
    EXPECT_GE(client.stats().connections_opened, 2u);
}

TEST_F(HttpRoundTrip, HandlerExceptionBecomes500) {
    HttpServer server(io.get_executor(), HttpServerOptions{},
                      [](HttpRequest) -> Task<HttpResponse> {
                          throw std::runtime_error("boom");
                          co_return HttpResponse{};
                      });
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    const auto r =
        run_until_done(io, client.send({"GET", fmt::format("http://127.0.0.1:{}/", port), {}, {}}));
    EXPECT_EQ(r.status, 500);
}

TEST_F(HttpRoundTrip, OversizedRequestBodyIsAnswered413) {
    auto options = tls_server();
    options.max_request_body_bytes = 1024;
    HttpServer server(io.get_executor(), options, echo);
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    const auto r = run_until_done(
        io, client.send(
                {"PUT", fmt::format("https://127.0.0.1:{}/", port), {}, std::string(4096, 'x')}));
    EXPECT_EQ(r.status, 413);
}

TEST_F(HttpRoundTrip, GracefulStopFinishesInFlightAndRefusesNewConnections) {
    HttpServer server(io.get_executor(), tls_server(), [&](HttpRequest r) -> Task<HttpResponse> {
        co_await sleep_for(200ms);
        co_return co_await echo(std::move(r));
    });
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    const auto url = fmt::format("https://127.0.0.1:{}/slow", port);
    std::optional<HttpResponse> in_flight;
    boost::asio::co_spawn(
        io,
        [&]() -> Task<void> {
            HttpRequest request{"POST", url, {}, "kept"};
            in_flight = co_await client.send(std::move(request));
        },
        boost::asio::detached);
    run_until_done(io, [&]() -> Task<void> {
        co_await sleep_for(50ms);
        EXPECT_EQ(server.in_flight(), 1u);
        co_await server.stop(Seconds(5));
    }());
    io.run_for(1s);
    ASSERT_TRUE(in_flight.has_value());
    EXPECT_EQ(in_flight->body, "kept");
    EXPECT_EQ(in_flight->headers.get("connection"), "close");
    HttpClient fresh(io.get_executor(), trusting_client());
    EXPECT_THROW(run_until_done(io, fresh.send({"GET", url, {}, {}})), ConnectFailed);
}

TEST_F(HttpRoundTrip, GracefulStopIsBoundedByGrace) {
    HttpServer server(io.get_executor(), tls_server(), [&](HttpRequest r) -> Task<HttpResponse> {
        co_await sleep_for(3s);
        co_return co_await echo(std::move(r));
    });
    const auto port = server.start();
    HttpClient client(io.get_executor(), trusting_client());
    bool failed_after_send = false;
    boost::asio::co_spawn(
        io,
        [&]() -> Task<void> {
            try {
                HttpRequest request{"GET", fmt::format("https://127.0.0.1:{}/", port), {}, {}};
                co_await client.send(std::move(request));
            } catch (const NetError& e) {
                failed_after_send = e.request_sent();
            }
        },
        boost::asio::detached);
    const auto start = std::chrono::steady_clock::now();
    run_until_done(io, [&]() -> Task<void> {
        co_await sleep_for(50ms);
        co_await server.stop(Seconds(0.2));
    }());
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
    io.run_for(4s);
    EXPECT_TRUE(failed_after_send);
}

}  // namespace
}  // namespace maf_sandbox::net
