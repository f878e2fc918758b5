#include "maf_sandbox/net/http_client.hpp"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>
#include <cerrno>
#include <deque>
#include <map>
#include <mutex>
#include <optional>

#include "tls_context.hpp"
#include "wire.hpp"

namespace maf_sandbox::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// What made the handshake fail in certificate verification, in OpenSSL's words; nullopt when it
// failed for another reason (a reset, a protocol mismatch), which a retry may get past.
std::optional<std::string> verification_problem(TlsStream& tls, const boost::system::error_code& ec,
                                                const std::string& host) {
    const long result = SSL_get_verify_result(tls.native_handle());
    // Our name check (the verify callback) refuses a trusted chain without an error code of its
    // own, which OpenSSL reports as unspecified.
    if (result == X509_V_ERR_UNSPECIFIED) {
        return fmt::format("the certificate does not name {}", host);
    }
    if (result != X509_V_OK) {
        return std::string(X509_verify_cert_error_string(result));
    }
    if (ec.category() == asio::error::get_ssl_category() &&
        ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        return fmt::format("the certificate does not name {}", host);
    }
    return std::nullopt;
}

constexpr std::uint32_t kMaxResponseHeaderBytes = 64 * 1024;

struct Connection {
    std::unique_ptr<beast::tcp_stream> plain;
    std::unique_ptr<TlsStream> tls;
    beast::flat_buffer buffer;
    Clock::time_point idle_since;

    beast::tcp_stream& tcp() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
};

struct ProxyEndpoint {
    std::string host;
    std::uint16_t port = 0;
    std::string authorization;  // "Basic …" or empty
};

std::string base64(std::string_view raw) {
    std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
    const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                  reinterpret_cast<const unsigned char*>(raw.data()),
                                  static_cast<int>(raw.size()));
    out.resize(static_cast<std::size_t>(n));
    return out;
}

std::optional<ProxyEndpoint> parse_proxy(const std::string& text) {
    if (text.empty()) {
        return std::nullopt;
    }
    const std::string url = text.find("://") == std::string::npos ? "http://" + text : text;
    auto parsed = boost::urls::parse_uri(url);
    if (!parsed || parsed->scheme() != "http" || parsed->encoded_host().empty()) {
        throw InvalidArgument(
            "HTTPS_PROXY must look like http://[user:password@]host:port; fix or unset it");
    }
    ProxyEndpoint out;
    out.host = parsed->host_type() == boost::urls::host_type::ipv6
                   ? std::string(parsed->host_address())
                   : std::string(parsed->encoded_host());
    out.port = parsed->has_port() ? parsed->port_number() : 80;
    if (parsed->has_userinfo()) {
        out.authorization = "Basic " + base64(std::string(parsed->userinfo()));
    }
    return out;
}

bool looks_alive(Connection& connection) {
    auto& socket = connection.tcp().socket();
    if (!socket.is_open() || connection.buffer.size() != 0) {
        return false;
    }
    char byte = 0;
    const auto n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    // 0: the server closed; >0: unsolicited bytes (a TLS alert). Either way it is not reusable.
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

bool is_timeout(const boost::system::error_code& ec, Clock::time_point deadline) {
    return ec == beast::error::timeout || Clock::now() >= deadline;
}

}  // namespace

struct HttpClient::Impl {
    Impl(asio::any_io_executor ex, HttpClientOptions opts)
        : executor(std::move(ex)),
          options(std::move(opts)),
          proxy(options.proxy.value_or(ProxySettings::from_environment())),
          proxy_endpoint(parse_proxy(proxy.https_proxy)),
          ssl(detail::make_client_context(options.ca_file, options.ca_pem,
                                          options.use_system_store)) {}

    asio::any_io_executor executor;
    HttpClientOptions options;
    ProxySettings proxy;
    std::optional<ProxyEndpoint> proxy_endpoint;
    asio::ssl::context ssl;

    mutable std::mutex mutex;
    std::map<std::string, std::deque<std::unique_ptr<Connection>>> idle;
    HttpClientStats stats;

    std::unique_ptr<Connection> take_idle(const std::string& key) {
        std::lock_guard lock(mutex);
        auto it = idle.find(key);
        if (it == idle.end()) {
            return nullptr;
        }
        const auto max_idle = std::chrono::duration_cast<Clock::duration>(options.idle_timeout);
        while (!it->second.empty()) {
            auto connection = std::move(it->second.back());
            it->second.pop_back();
            if (Clock::now() - connection->idle_since < max_idle && looks_alive(*connection)) {
                return connection;
            }
        }
        return nullptr;
    }

    void give_back(const std::string& key, std::unique_ptr<Connection> connection) {
        std::lock_guard lock(mutex);
        auto& queue = idle[key];
        if (queue.size() < options.max_idle_per_host) {
            connection->idle_since = Clock::now();
            queue.push_back(std::move(connection));
        }
    }

    Task<tcp::resolver::results_type> resolve(const std::string& host, std::uint16_t port,
                                              Clock::time_point deadline) {
        tcp::resolver resolver(executor);
        asio::steady_timer timer(executor, deadline);
        timer.async_wait([&resolver](boost::system::error_code ec) {
            if (!ec) {
                resolver.cancel();
            }
        });
        boost::system::error_code ec;
        auto results = co_await resolver.async_resolve(
            host, std::to_string(port), asio::redirect_error(asio::use_awaitable, ec));
        timer.cancel();
        if (ec) {
            if (is_timeout(ec, deadline)) {
                throw DeadlineExceeded(fmt::format("resolving {} did not finish before the "
                                                   "request's deadline",
                                                   host),
                                       RequestPhase::not_sent);
            }
            throw ConnectFailed(fmt::format("cannot resolve {}: {}; check the host name and DNS",
                                            host, ec.message()));
        }
        co_return results;
    }

    Task<void> tunnel(beast::tcp_stream& stream, const ParsedUrl& url, Clock::time_point deadline) {
        http::request<http::empty_body> request{http::verb::connect, url.authority(), 11};
        request.set(http::field::host, url.authority());
        if (!proxy_endpoint->authorization.empty()) {
            request.set(http::field::proxy_authorization, proxy_endpoint->authorization);
        }
        boost::system::error_code ec;
        stream.expires_at(deadline);
        co_await http::async_write(stream, request, asio::redirect_error(asio::use_awaitable, ec));
        beast::flat_buffer buffer;
        http::response_parser<http::empty_body> parser;
        parser.skip(true);  // a CONNECT answer has no body
        if (!ec) {
            co_await http::async_read(stream, buffer, parser,
                                      asio::redirect_error(asio::use_awaitable, ec));
        }
        if (ec) {
            if (is_timeout(ec, deadline)) {
                throw DeadlineExceeded("the proxy tunnel did not open before the deadline",
                                       RequestPhase::not_sent);
            }
            throw ConnectFailed(fmt::format(
                "the proxy {}:{} failed while opening a tunnel to {}: "
                "{}; check HTTPS_PROXY",
                proxy_endpoint->host, proxy_endpoint->port, url.authority(), ec.message()));
        }
        if (parser.get().result_int() / 100 != 2) {
            throw ConnectFailed(fmt::format(
                "the proxy {}:{} refused a tunnel to {} with status {}; check HTTPS_PROXY, its "
                "credentials and NO_PROXY",
                proxy_endpoint->host, proxy_endpoint->port, url.authority(),
                parser.get().result_int()));
        }
    }

    Task<std::unique_ptr<Connection>> connect(const ParsedUrl& url, Clock::time_point deadline) {
        const bool via_proxy =
            url.is_https() && proxy_endpoint.has_value() && proxy.applies_to(url.host);
        const std::string& dial_host = via_proxy ? proxy_endpoint->host : url.host;
        const std::uint16_t dial_port = via_proxy ? proxy_endpoint->port : url.port;

        auto endpoints = co_await resolve(dial_host, dial_port, deadline);
        beast::tcp_stream stream(executor);
        stream.expires_at(deadline);
        boost::system::error_code ec;
        co_await stream.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            if (is_timeout(ec, deadline)) {
                throw DeadlineExceeded(fmt::format("connecting to {}:{} did not finish before "
                                                   "the deadline",
                                                   dial_host, dial_port),
                                       RequestPhase::not_sent);
            }
            throw ConnectFailed(
                fmt::format("cannot connect to {}:{}: {}; check that the service "
                            "is running and reachable",
                            dial_host, dial_port, ec.message()));
        }
        stream.socket().set_option(tcp::no_delay(true), ec);
        if (via_proxy) {
            co_await tunnel(stream, url, deadline);
        }

        auto connection = std::make_unique<Connection>();
        if (url.is_https()) {
            connection->tls = std::make_unique<TlsStream>(std::move(stream), ssl);
            boost::system::error_code parse_ec;
            asio::ip::make_address(url.host, parse_ec);
            if (parse_ec) {  // SNI carries names only, never addresses
                SSL_set_tlsext_host_name(connection->tls->native_handle(), url.host.c_str());
            }
            connection->tls->set_verify_callback(asio::ssl::host_name_verification(url.host));
            beast::get_lowest_layer(*connection->tls).expires_at(deadline);
            co_await connection->tls->async_handshake(
                asio::ssl::stream_base::client, asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                if (is_timeout(ec, deadline)) {
                    throw DeadlineExceeded(
                        fmt::format("the TLS handshake with {} did not finish before the "
                                    "deadline",
                                    url.authority()),
                        RequestPhase::not_sent);
                }
                if (auto problem = verification_problem(*connection->tls, ec, url.host)) {
                    throw TlsVerificationFailed(
                        fmt::format("the TLS certificate of {} was not accepted: {}; this is not "
                                    "retried. If the server's certificate is signed by a private "
                                    "CA, trust that CA's certificate (a CA file)",
                                    url.authority(), *problem),
                        *problem);
                }
                throw ConnectFailed(fmt::format(
                    "the TLS handshake with {} failed: {}; check the server certificate and the "
                    "CA file",
                    url.authority(), ec.message()));
            }
        } else {
            connection->plain = std::make_unique<beast::tcp_stream>(std::move(stream));
        }
        {
            std::lock_guard lock(mutex);
            ++stats.connections_opened;
        }
        co_return connection;
    }

    template <typename Stream>
    Task<boost::system::error_code> write(Stream& stream, Connection& connection,
                                          http::request<http::string_body>& request,
                                          Clock::time_point deadline) {
        boost::system::error_code ec;
        connection.tcp().expires_at(deadline);
        co_await http::async_write(stream, request, asio::redirect_error(asio::use_awaitable, ec));
        co_return ec;
    }

    template <typename Stream>
    Task<boost::system::error_code> read(Stream& stream, Connection& connection,
                                         http::response_parser<http::string_body>& parser,
                                         Clock::time_point deadline) {
        boost::system::error_code ec;
        connection.tcp().expires_at(deadline);
        co_await http::async_read(stream, connection.buffer, parser,
                                  asio::redirect_error(asio::use_awaitable, ec));
        co_return ec;
    }
};

HttpClient::HttpClient(boost::asio::any_io_executor executor, HttpClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

HttpClient::~HttpClient() = default;

void HttpClient::close_idle() {
    std::lock_guard lock(impl_->mutex);
    impl_->idle.clear();
}

HttpClientStats HttpClient::stats() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->stats;
}

Task<HttpResponse> HttpClient::send(HttpRequest request, RequestOptions options) {
    auto impl = impl_;  // the coroutine keeps the pool alive even if the client goes away
    const ParsedUrl url = parse_http_url(request.target);
    const auto timeout = options.timeout.value_or(impl->options.default_timeout);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
    const auto limit =
        options.max_response_bytes.value_or(impl->options.default_max_response_bytes);
    const std::string pool_key = fmt::format("{}://{}", url.scheme, url.authority());

    http::request<http::string_body> wire;
    wire.version(11);
    if (const auto verb = http::string_to_verb(request.method); verb != http::verb::unknown) {
        wire.method(verb);
    } else {
        wire.method_string(request.method);
    }
    wire.target(url.target);
    detail::copy_headers(request.headers, wire);
    if (!request.headers.contains("host")) {
        const bool default_port = url.port == (url.is_https() ? 443 : 80);
        wire.set(http::field::host,
                 default_port
                     ? (url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host)
                     : url.authority());
    }
    if (!request.headers.contains("user-agent") && !impl->options.user_agent.empty()) {
        wire.set(http::field::user_agent, impl->options.user_agent);
    }
    wire.body() = std::move(request.body);
    wire.prepare_payload();
    wire.keep_alive(true);
    const bool is_head = wire.method() == http::verb::head;

    for (int attempt = 0;; ++attempt) {
        auto connection = attempt == 0 ? impl->take_idle(pool_key) : nullptr;
        const bool reused = connection != nullptr;
        if (!connection) {
            connection = co_await impl->connect(url, deadline);
        }
        // Plain if/else: GCC 12 miscompiles co_await inside a conditional expression.
        boost::system::error_code ec;
        if (connection->tls) {
            ec = co_await impl->write(*connection->tls, *connection, wire, deadline);
        } else {
            ec = co_await impl->write(*connection->plain, *connection, wire, deadline);
        }
        if (ec) {
            if (is_timeout(ec, deadline)) {
                throw DeadlineExceeded(
                    fmt::format("sending {} {} did not finish before the deadline", request.method,
                                url.authority()),
                    RequestPhase::not_sent);
            }
            if (reused) {
                continue;  // the pooled connection was dead; the request did not go out
            }
            throw ConnectFailed(
                fmt::format("sending {} to {} failed: {}; the request was not "
                            "sent, retry it",
                            request.method, url.authority(), ec.message()));
        }

        http::response_parser<http::string_body> parser;
        parser.header_limit(
            static_cast<std::uint32_t>(std::min<std::size_t>(limit, kMaxResponseHeaderBytes)));
        parser.body_limit(limit);
        if (is_head) {
            parser.skip(true);
        }
        if (connection->tls) {
            ec = co_await impl->read(*connection->tls, *connection, parser, deadline);
        } else {
            ec = co_await impl->read(*connection->plain, *connection, parser, deadline);
        }
        if (ec) {
            if (ec == http::error::body_limit || ec == http::error::header_limit) {
                throw ResponseTooLarge(fmt::format(
                    "the response from {} exceeds {} bytes; raise the bound only if the caller "
                    "can hold it",
                    url.authority(), limit));
            }
            if (is_timeout(ec, deadline)) {
                throw DeadlineExceeded(fmt::format("{} {} sent but no complete answer arrived "
                                                   "before the deadline",
                                                   request.method, url.authority()),
                                       RequestPhase::sent);
            }
            throw ResponseFailed(fmt::format(
                "{} {} was sent but the connection failed before a complete response: {}",
                request.method, url.authority(), ec.message()));
        }
        auto message = parser.release();
        HttpResponse response;
        response.status = static_cast<int>(message.result_int());
        response.headers = detail::headers_of(message.base());
        response.body = std::move(message.body());
        {
            std::lock_guard lock(impl->mutex);
            ++impl->stats.requests;
            if (reused) {
                ++impl->stats.reused;
            }
        }
        if (message.keep_alive() && !message.need_eof()) {
            impl->give_back(pool_key, std::move(connection));
        }
        co_return response;
    }
}

}  // namespace maf_sandbox::net
