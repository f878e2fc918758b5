#include "maf_sandbox/net/http_server.hpp"

#include <fmt/format.h>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <map>
#include <mutex>

#include "maf_sandbox/core/utf8.hpp"
#include "tls_context.hpp"
#include "wire.hpp"

namespace maf_sandbox::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kMaxRequestHeaderBytes = 64 * 1024;

std::chrono::steady_clock::duration to_duration(Seconds s) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(s);
}

// What the server answers itself (before or instead of the handler): RFC 7807 problem+json, so a
// JSON client (the emulator's, MCP's) can read every refusal the same way as the handler's own.
HttpResponse problem_error(int status, std::string_view title, std::string_view detail) {
    HttpResponse response;
    response.status = status;
    response.headers.set("Content-Type", "application/problem+json");
    response.body = boost::json::serialize(boost::json::object{
        {"title", title}, {"status", status}, {"detail", replace_invalid_utf8(detail)}});
    return response;
}

bool is_chunked(const HttpHeaders& headers) {
    const auto coding = headers.get("Transfer-Encoding");
    return coding && iequals(*coding, "chunked");
}

HttpResponse body_too_large(std::size_t limit) {
    return problem_error(413, "PayloadTooLarge",
                         fmt::format("The request body is over {} bytes; send less.", limit));
}

// A request the parser refused as malformed (a control character in a header, a bad
// Content-Length or chunk size, ...): answered 400, where a lost connection would leave the client
// guessing. Running out of input or time is not malformed: there is no one left to answer.
bool malformed_request(const boost::system::error_code& ec) {
    if (ec.category() != http::make_error_code(http::error::bad_method).category()) {
        return false;
    }
    switch (static_cast<http::error>(ec.value())) {
        case http::error::bad_line_ending:
        case http::error::bad_method:
        case http::error::bad_target:
        case http::error::bad_version:
        case http::error::bad_field:
        case http::error::bad_value:
        case http::error::bad_content_length:
        case http::error::bad_transfer_encoding:
        case http::error::bad_chunk:
        case http::error::bad_chunk_extension:
        case http::error::bad_obs_fold:
        case http::error::unexpected_body:
            return true;
        default:
            return false;
    }
}

http::response<http::string_body> to_wire(HttpResponse response, bool keep_alive,
                                          bool head_request) {
    http::response<http::string_body> wire;
    wire.version(11);
    wire.result(static_cast<unsigned>(response.status));
    detail::copy_headers(response.headers, wire);
    const auto size = response.body.size();
    if (!head_request) {
        wire.body() = std::move(response.body);
        wire.prepare_payload();
    } else {
        wire.content_length(size);
    }
    wire.keep_alive(keep_alive);
    return wire;
}

// The status line, headers and half the body of `response`, as bytes: what a connection dropped
// mid-response leaves behind.
std::string truncated_bytes(const HttpResponse& response) {
    auto body = response.body.empty() ? std::string("{\"partial\":") : response.body;
    std::string out = fmt::format("HTTP/1.1 {} Fault\r\n", response.status);
    for (const auto& [name, value] : response.headers) {
        if (!iequals(name, "content-length")) {
            out += fmt::format("{}: {}\r\n", name, value);
        }
    }
    out += fmt::format("Content-Length: {}\r\n\r\n", body.size() * 2);
    out += body.substr(0, std::max<std::size_t>(1, body.size() / 2));
    return out;
}

}  // namespace

struct HttpServer::Impl : std::enable_shared_from_this<Impl> {
    Impl(asio::any_io_executor ex, HttpServerOptions opts, HttpHandler h)
        : executor(std::move(ex)),
          options(std::move(opts)),
          handler(std::move(h)),
          acceptor(executor) {
        if (options.tls) {
            ssl.emplace(detail::make_server_context(*options.tls));
        }
    }

    struct SessionState {
        beast::tcp_stream* tcp = nullptr;
        bool busy = false;
    };

    asio::any_io_executor executor;
    HttpServerOptions options;
    HttpHandler handler;
    std::optional<asio::ssl::context> ssl;
    tcp::acceptor acceptor;
    std::uint16_t bound_port = 0;

    mutable std::mutex mutex;
    bool stopping = false;
    std::size_t in_flight = 0;
    std::uint64_t next_session = 0;
    std::map<std::uint64_t, SessionState> sessions;

    void close_sessions(bool idle_only) {
        std::lock_guard lock(mutex);
        for (auto& [id, state] : sessions) {
            if (!idle_only || !state.busy) {
                boost::system::error_code ec;
                state.tcp->socket().shutdown(tcp::socket::shutdown_both, ec);
                state.tcp->socket().close(ec);
            }
        }
    }

    Task<void> accept_loop() {
        auto self = shared_from_this();
        for (;;) {
            boost::system::error_code ec;
            auto socket =
                co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                {
                    std::lock_guard lock(mutex);
                    if (stopping || !acceptor.is_open()) {
                        co_return;
                    }
                }
                // Out of descriptors or a transient error: back off instead of spinning.
                asio::steady_timer pause(executor, std::chrono::milliseconds(50));
                co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
                continue;
            }
            asio::co_spawn(executor, session(std::move(socket)), asio::detached);
        }
    }

    Task<void> session(tcp::socket socket) {
        auto self = shared_from_this();
        try {
            boost::system::error_code ec;
            socket.set_option(tcp::no_delay(true), ec);
            beast::tcp_stream stream(std::move(socket));
            if (ssl) {
                TlsStream tls(std::move(stream), *ssl);
                beast::get_lowest_layer(tls).expires_after(to_duration(options.read_timeout));
                co_await tls.async_handshake(asio::ssl::stream_base::server,
                                             asio::redirect_error(asio::use_awaitable, ec));
                if (ec) {
                    co_return;  // a client that failed verification or went away
                }
                co_await serve(tls, beast::get_lowest_layer(tls));
            } else {
                co_await serve(stream, stream);
            }
        } catch (const std::exception&) {
            // One broken connection never takes the server down.
        }
    }

    // Registers the connection so stop() can close it while it waits for a request.
    struct Registration {
        Impl& impl;
        std::uint64_t id;
        Registration(Impl& i, beast::tcp_stream& tcp) : impl(i) {
            std::lock_guard lock(impl.mutex);
            id = impl.next_session++;
            impl.sessions[id] = SessionState{&tcp, false};
        }
        ~Registration() {
            std::lock_guard lock(impl.mutex);
            impl.sessions.erase(id);
        }
        void busy(bool value) {
            std::lock_guard lock(impl.mutex);
            impl.sessions[id].busy = value;
            impl.in_flight += value ? 1 : static_cast<std::size_t>(-1);
        }
    };

    // A body of unknown length: one chunk per piece, written as soon as the piece is there, so
    // the client sees each one when it happens; an empty piece is the last chunk.
    template <typename Stream>
    Task<void> write_chunks(Stream& stream, beast::tcp_stream& tcp, BodyStream& source,
                            boost::system::error_code& ec) {
        for (;;) {
            std::string_view piece;
            try {
                piece = co_await source.next();
            } catch (const std::exception&) {
                ec = asio::error::connection_aborted;
                co_return;
            }
            const auto frame =
                piece.empty() ? std::string("0\r\n\r\n") : fmt::format("{:x}\r\n", piece.size());
            std::array<asio::const_buffer, 3> buffers{
                asio::buffer(frame), asio::buffer(piece.data(), piece.size()),
                asio::buffer(piece.empty() ? std::string_view() : std::string_view("\r\n"))};
            tcp.expires_after(to_duration(options.read_timeout));
            co_await asio::async_write(stream, buffers,
                                       asio::redirect_error(asio::use_awaitable, ec));
            if (ec || piece.empty()) {
                co_return;
            }
        }
    }

    // A streamed body: the header with the stream's size, then its pieces as they come, so the
    // server holds one piece at a time. A short or failing stream drops the connection.
    template <typename Stream>
    Task<void> write_streamed(Stream& stream, beast::tcp_stream& tcp, HttpResponse response,
                              bool keep_alive, bool head, boost::system::error_code& ec) {
        auto source = std::move(response.body_stream);
        http::response<http::empty_body> wire;
        wire.version(11);
        wire.result(static_cast<unsigned>(response.status));
        // A handler that sets `Transfer-Encoding: chunked` with a body stream sends a body of
        // unknown length (an event stream): size() is ignored, each piece goes out as one chunk as
        // soon as next() returns it, and an empty piece ends the body.
        const bool chunked = is_chunked(response.headers);
        response.headers.remove("Transfer-Encoding");
        detail::copy_headers(response.headers, wire);
        if (chunked) {
            wire.chunked(true);
        } else {
            wire.content_length(source->size());
        }
        wire.keep_alive(keep_alive);
        tcp.expires_after(to_duration(options.read_timeout));
        http::response_serializer<http::empty_body> serializer(wire);
        co_await http::async_write_header(stream, serializer,
                                          asio::redirect_error(asio::use_awaitable, ec));
        if (ec || head) {
            co_return;
        }
        if (chunked) {
            co_await write_chunks(stream, tcp, *source, ec);
            co_return;
        }
        std::uint64_t left = source->size();
        while (left > 0) {
            std::string_view piece;
            try {
                piece = co_await source->next();
            } catch (const std::exception&) {
                piece = {};
            }
            if (piece.empty()) {
                ec = asio::error::connection_aborted;
                co_return;
            }
            piece = piece.substr(
                0, static_cast<std::size_t>(std::min<std::uint64_t>(left, piece.size())));
            tcp.expires_after(to_duration(options.read_timeout));
            co_await asio::async_write(stream, asio::buffer(piece.data(), piece.size()),
                                       asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                co_return;
            }
            left -= piece.size();
        }
    }

    template <typename Stream>
    Task<void> write_response(Stream& stream, beast::tcp_stream& tcp, HttpResponse response,
                              bool keep_alive, bool head, boost::system::error_code& ec) {
        if (response.body_stream) {
            co_await write_streamed(stream, tcp, std::move(response), keep_alive, head, ec);
            co_return;
        }
        auto wire = to_wire(std::move(response), keep_alive, head);
        tcp.expires_after(to_duration(options.read_timeout));
        if (head) {
            http::response_serializer<http::string_body> serializer(wire);
            serializer.split(true);
            co_await http::async_write_header(stream, serializer,
                                              asio::redirect_error(asio::use_awaitable, ec));
        } else {
            co_await http::async_write(stream, wire, asio::redirect_error(asio::use_awaitable, ec));
        }
    }

    // Ends a connection after a refusal answered before the request was read (413, 400): our
    // side is shut first, so the client has the refusal and our FIN at once, then what it is
    // still sending is read and discarded (bounded in time and bytes) until it closes too, so the
    // close is an orderly one rather than a reset that could discard the refusal in its buffer.
    template <typename Stream>
    Task<void> drain(Stream& stream, beast::tcp_stream& tcp) {
        boost::system::error_code ignored;
        tcp.socket().shutdown(tcp::socket::shutdown_send, ignored);
        char sink[16384];
        std::size_t total = 0;
        tcp.expires_after(std::chrono::seconds(2));
        while (total < 16 * kMiB) {
            boost::system::error_code ec;
            const auto n = co_await stream.async_read_some(
                asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                break;
            }
            total += n;
        }
    }

    static bool has_body(const http::request_parser<http::string_body>& parser) {
        const auto length = parser.content_length();
        return length ? *length > 0 : parser.chunked();
    }

    // Asks the admission about a request whose body is still unread; the refusal to answer, if
    // it refuses (a failing admission refuses too: the body is not read on a guess).
    Task<std::optional<HttpResponse>> admit(const http::request_parser<http::string_body>& parser,
                                            std::shared_ptr<void>& hold) {
        const auto& wire = parser.get();
        HttpRequest head;
        head.method = std::string(wire.method_string());
        head.target = std::string(wire.target());
        head.headers = detail::headers_of(wire.base());
        try {
            const auto declared = parser.content_length();
            const std::optional<std::uint64_t> length =
                declared ? std::optional<std::uint64_t>(*declared) : std::nullopt;
            auto admission = co_await options.admit_body(head, length);
            if (admission.refusal) {
                co_return std::move(admission.refusal);
            }
            hold = std::move(admission.hold);
            co_return std::nullopt;
        } catch (const std::exception& e) {
            co_return problem_error(500, "InternalServerError", e.what());
        }
    }

    template <typename Stream>
    Task<void> serve(Stream& stream, beast::tcp_stream& tcp) {
        Registration registration(*this, tcp);
        beast::flat_buffer buffer;
        for (;;) {
            {
                std::lock_guard lock(mutex);
                if (stopping) {
                    break;
                }
            }
            boost::system::error_code ec;
            http::request_parser<http::string_body> parser;
            parser.header_limit(kMaxRequestHeaderBytes);
            parser.body_limit(options.max_request_body_bytes);
            tcp.expires_after(to_duration(options.idle_timeout));
            co_await http::async_read_header(stream, buffer, parser,
                                             asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                if (ec == http::error::header_limit) {
                    auto refusal =
                        problem_error(431, "RequestHeaderFieldsTooLarge",
                                      fmt::format("The request line and headers are over {} bytes.",
                                                  kMaxRequestHeaderBytes));
                    co_await write_response(stream, tcp, std::move(refusal), false, false, ec);
                } else if (ec == http::error::body_limit) {  // a Content-Length over the bound
                    auto refusal = body_too_large(options.max_request_body_bytes);
                    co_await write_response(stream, tcp, std::move(refusal), false, false, ec);
                    co_await drain(stream, tcp);
                } else if (malformed_request(ec)) {
                    auto refusal = problem_error(
                        400, "BadRequest",
                        fmt::format("The request is not valid HTTP/1.1: {}.", ec.message()));
                    co_await write_response(stream, tcp, std::move(refusal), false, false, ec);
                    co_await drain(stream, tcp);
                }
                break;
            }
            registration.busy(true);
            struct Idle {
                Registration& r;
                ~Idle() { r.busy(false); }
            } idle{registration};

            std::shared_ptr<void> admission;
            if (options.admit_body && has_body(parser)) {
                auto refusal = co_await admit(parser, admission);
                if (refusal) {
                    co_await write_response(stream, tcp, std::move(*refusal), false, false, ec);
                    co_await drain(stream, tcp);
                    break;
                }
            }

            tcp.expires_after(to_duration(options.read_timeout));
            co_await http::async_read(stream, buffer, parser,
                                      asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                if (ec == http::error::body_limit) {
                    auto refusal = body_too_large(options.max_request_body_bytes);
                    co_await write_response(stream, tcp, std::move(refusal), false, false, ec);
                    co_await drain(stream, tcp);
                } else if (malformed_request(ec)) {
                    auto refusal = problem_error(
                        400, "BadRequest",
                        fmt::format("The request body is not valid HTTP/1.1: {}.", ec.message()));
                    co_await write_response(stream, tcp, std::move(refusal), false, false, ec);
                    co_await drain(stream, tcp);
                }
                break;
            }
            auto wire = parser.release();
            const bool head = wire.method() == http::verb::head;
            const bool client_keep_alive = wire.keep_alive();
            HttpRequest request;
            request.method = std::string(wire.method_string());
            request.target = std::string(wire.target());
            request.headers = detail::headers_of(wire.base());
            request.body = std::move(wire.body());
            request.admission = std::move(admission);

            HttpResponse response;
            std::optional<std::string> abort_bytes;
            try {
                response = co_await handler(std::move(request));
            } catch (const AbortConnection& abort) {
                abort_bytes = truncated_bytes(abort.partial());
            } catch (const std::exception& e) {
                response = problem_error(500, "InternalServerError", e.what());
            }
            if (abort_bytes) {
                tcp.expires_after(to_duration(options.read_timeout));
                co_await asio::async_write(stream, asio::buffer(*abort_bytes),
                                           asio::redirect_error(asio::use_awaitable, ec));
                break;
            }
            bool keep_alive = client_keep_alive;
            {
                std::lock_guard lock(mutex);
                keep_alive = keep_alive && !stopping;
            }
            co_await write_response(stream, tcp, std::move(response), keep_alive, head, ec);
            if (ec || !keep_alive) {
                break;
            }
        }
        boost::system::error_code ignored;
        tcp.socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
};

HttpServer::HttpServer(boost::asio::any_io_executor executor, HttpServerOptions options,
                       HttpHandler handler)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() {
    {
        std::lock_guard lock(impl_->mutex);
        impl_->stopping = true;
    }
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
    impl_->close_sessions(false);
}

std::uint16_t HttpServer::start() {
    auto& impl = *impl_;
    boost::system::error_code ec;
    const std::string host = impl.options.host == "localhost" ? "127.0.0.1" : impl.options.host;
    const auto address = boost::asio::ip::make_address(host, ec);
    if (ec) {
        throw InvalidArgument(
            fmt::format("listen address '{}' is not an IP address; pass one like 127.0.0.1", host));
    }
    const tcp::endpoint endpoint(address, impl.options.port);
    impl.acceptor.open(endpoint.protocol(), ec);
    if (!ec) {
        impl.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
        impl.acceptor.bind(endpoint, ec);
    }
    if (!ec) {
        impl.acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
    }
    if (ec) {
        throw SystemError(ec.value(), fmt::format("listening on {}:{}", host, impl.options.port),
                          "choose a free port, or 0 to pick one");
    }
    impl.bound_port = impl.acceptor.local_endpoint().port();
    boost::asio::co_spawn(impl.executor, impl.accept_loop(), boost::asio::detached);
    return impl.bound_port;
}

std::uint16_t HttpServer::port() const {
    return impl_->bound_port;
}

bool HttpServer::tls() const {
    return impl_->ssl.has_value();
}

std::size_t HttpServer::in_flight() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->in_flight;
}

Task<void> HttpServer::stop(Seconds grace) {
    auto impl = impl_;
    {
        std::lock_guard lock(impl->mutex);
        impl->stopping = true;
    }
    boost::system::error_code ec;
    impl->acceptor.close(ec);
    impl->close_sessions(true);
    const auto deadline = Clock::now() + to_duration(grace);
    boost::asio::steady_timer timer(impl->executor);
    for (;;) {
        {
            std::lock_guard lock(impl->mutex);
            if (impl->in_flight == 0 || Clock::now() >= deadline) {
                break;
            }
        }
        timer.expires_after(std::chrono::milliseconds(10));
        co_await timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    }
    impl->close_sessions(false);
}

}  // namespace maf_sandbox::net
