// One guest connection of the egress proxy: deny by default, HTTP forwarding and CONNECT for
// allowlisted hosts only, SNI checked against the CONNECT host, names resolved here (never by the
// guest) and the resolved address checked before connecting. Every way out of a session that is
// not "relay allowed bytes" closes the guest's connection: the proxy fails closed. Over 500 lines
// because a session is one state machine (head, policy, upstream, relay, deadlines) in one class.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>

#include "address_ranges.hpp"
#include "egress_decision_log.hpp"
#include "egress_host_names.hpp"
#include "egress_hosts_file.hpp"
#include "egress_http.hpp"
#include "egress_proxy_state.hpp"
#include "egress_relay.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "tls_client_hello.hpp"

namespace maf_sandbox::runtime::proxy {
namespace {

using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

// Body bytes read from the guest at once.
constexpr std::size_t kRelayBuffer = 256 * 1024;
constexpr std::size_t kHeadReadChunk = 8 * 1024;
constexpr std::size_t kMaxChunkLine = 4 * 1024;
// After a refusal: how long and how much of the guest's leftover input is read before closing.
constexpr std::chrono::milliseconds kLinger{2000};
constexpr std::size_t kMaxLingerBytes = 1024 * 1024;
constexpr std::string_view kConnectEstablished = "HTTP/1.1 200 Connection Established\r\n\r\n";

// A failure that is not a policy denial: the allowed upstream could not be reached.
struct GatewayFailure {
    int status;
    std::string_view phrase;
    std::string_view why;
};

// The guest went away or a deadline closed the connection: nothing left to answer.
struct SessionClosed {};

std::string rule_text(const EgressRule& rule) {
    return (rule.wildcard ? "*." : "") + rule.host;
}

class Session : public std::enable_shared_from_this<Session> {
  public:
    Session(ProxyState& proxy, tcp::socket guest)
        : proxy_(proxy),
          guest_(std::move(guest)),
          upstream_(guest_.get_executor()),
          timer_(guest_.get_executor()) {
        ++proxy_.active;
    }
    ~Session() { --proxy_.active; }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    asio::awaitable<void> start(std::shared_ptr<Session> self) {
        auto watchdog = watch(self);
        asio::co_spawn(guest_.get_executor(), std::move(watchdog), asio::detached);
        error_code ignored;
        guest_.set_option(tcp::no_delay(true), ignored);
        std::optional<std::string> refusal;
        std::optional<GatewayFailure> failure;
        try {
            co_await serve(self);
        } catch (const EgressRefusal& e) {
            refusal = std::string(e.reason);
        } catch (const GatewayFailure& e) {
            failure = e;
        } catch (const SessionClosed&) {
            finish();
        } catch (const std::exception& e) {
            // Fail closed: whatever went wrong, the guest's connection ends here.
            std::fprintf(stderr, "maf-sandbox egress proxy: session failed: %s\n", e.what());
            finish();
        } catch (...) {
            finish();
        }
        if (refusal || failure) {
            co_await answer_failure(refusal, failure);
        }
    }

  private:
    asio::awaitable<void> serve(std::shared_ptr<Session> self) {
        arm(proxy_.options.header_timeout);
        const auto head_size = co_await read_head();
        const auto head = parse_head(head_size);
        if (head.method == "CONNECT") {
            co_await serve_connect(head, self);
        } else {
            co_await serve_forward(head, self);
        }
    }

    RequestHead parse_head(std::size_t head_size) {
        const std::string head_text = buffer_.substr(0, head_size);
        buffer_.erase(0, head_size);
        auto head = parse_request_head(head_text);
        method_ = head.method;
        return head;
    }

    // --- HTTP forwarding -----------------------------------------------------------------------

    asio::awaitable<void> serve_forward(const RequestHead& head, std::shared_ptr<Session> self) {
        const auto target = parse_absolute_target(head.target);
        host_ = target.authority.host;
        port_ = target.authority.port;
        if (target.authority.ip_literal) {
            throw EgressRefusal{"ip literal"};
        }
        check_host_field(head, target.authority);
        const auto rule = check_rules(target.authority);
        const auto framing = body_framing(head);
        co_await connect_upstream(target.authority);
        decide(true, "matched " + rule);

        const auto host_field = port_ == 80 ? host_ : host_ + ":" + std::to_string(port_);
        const std::string upstream_head =
            upstream_request_head(head, target.path, host_field, framing);
        arm(idle_timeout());
        co_await write_all(upstream_, upstream_head);
        auto upload = send_body(framing, self);
        asio::co_spawn(guest_.get_executor(), std::move(upload), asio::detached);
        co_await relay_response();
        finish();
    }

    void check_host_field(const RequestHead& head, const Authority& authority) {
        const HttpField* host_field = nullptr;
        for (const auto& field : head.fields) {
            if (iequals(field.name, "host")) {
                if (host_field) {
                    throw EgressRefusal{"multiple host headers"};
                }
                host_field = &field;
            }
        }
        if (!host_field) {
            return;  // HTTP/1.0 style: the URI's authority is what gets sent
        }
        Authority named;
        try {
            named = parse_authority(host_field->value, std::uint16_t{80});
        } catch (const EgressRefusal&) {
            throw EgressRefusal{"host header mismatch"};
        }
        if (named.host != authority.host || named.port != authority.port) {
            throw EgressRefusal{"host header mismatch"};
        }
    }

    asio::awaitable<void> send_body(BodyFraming framing, std::shared_ptr<Session> self) {
        (void)self;  // keeps the session alive while the body streams
        try {
            if (framing.chunked) {
                co_await relay_chunked();
            } else {
                co_await relay_exact(framing.content_length);
            }
        } catch (...) {
            // A malformed body, a closed guest or anything else: the request is cut off upstream
            // too, never passed on unchecked.
            finish();
        }
    }

    // Relays `count` body bytes from the guest (what is buffered first) to the upstream.
    asio::awaitable<void> relay_exact(std::uint64_t count) {
        while (count > 0) {
            if (buffer_.empty()) {
                co_await read_guest(
                    static_cast<std::size_t>(std::min<std::uint64_t>(count, kRelayBuffer)));
            }
            const auto take =
                static_cast<std::size_t>(std::min<std::uint64_t>(count, buffer_.size()));
            const auto piece = asio::buffer(buffer_.data(), take);
            co_await write_all(upstream_, piece);
            buffer_.erase(0, take);
            count -= take;
            arm(idle_timeout());
        }
    }

    // Re-frames a chunked body chunk by chunk: sizes are parsed (extensions and trailers are
    // dropped), so what reaches the upstream is exactly the body the proxy read, never more.
    asio::awaitable<void> relay_chunked() {
        while (true) {
            const auto line = co_await read_line();
            const auto size_text = line.substr(0, line.find(';'));
            std::uint64_t size = 0;
            if (size_text.empty() || size_text.size() > 15) {
                throw EgressRefusal{"malformed chunked body"};
            }
            for (const char c : size_text) {
                const int digit = (c >= '0' && c <= '9')   ? c - '0'
                                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                           : -1;
                if (digit < 0) {
                    throw EgressRefusal{"malformed chunked body"};
                }
                size = size * 16 + static_cast<std::uint64_t>(digit);
            }
            if (size == 0) {
                while (!(co_await read_line()).empty()) {
                }
                co_await write_all(upstream_, std::string_view("0\r\n\r\n"));
                co_return;
            }
            const std::string chunk_head = fmt_hex(size) + "\r\n";
            co_await write_all(upstream_, chunk_head);
            co_await relay_exact(size);
            if (!(co_await read_line()).empty()) {
                throw EgressRefusal{"malformed chunked body"};
            }
            co_await write_all(upstream_, std::string_view("\r\n"));
        }
    }

    static std::string fmt_hex(std::uint64_t value) {
        char text[20];
        const int length =
            std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(value));
        return std::string(text, static_cast<std::size_t>(length));
    }

    // One CRLF-terminated line from the guest, without its CRLF.
    asio::awaitable<std::string> read_line() {
        while (true) {
            const auto end = buffer_.find("\r\n");
            if (end != std::string::npos) {
                std::string line = buffer_.substr(0, end);
                buffer_.erase(0, end + 2);
                co_return line;
            }
            if (buffer_.size() > kMaxChunkLine) {
                throw EgressRefusal{"malformed chunked body"};
            }
            co_await read_guest(kHeadReadChunk);
        }
    }

    // Reads the upstream's response head, rewrites it for the guest, then relays the rest of the
    // response until the upstream closes (we asked it to: Connection: close).
    asio::awaitable<void> relay_response() {
        std::string head;
        std::size_t end = std::string::npos;
        std::vector<char> chunk(kHeadReadChunk);
        while ((end = head.find("\r\n\r\n")) == std::string::npos) {
            if (head.size() > kMaxResponseHead) {
                throw GatewayFailure{502, "Bad Gateway", "the upstream response head is too large"};
            }
            error_code ec;
            const auto into = asio::buffer(chunk);
            const auto n = co_await upstream_.async_read_some(
                into, asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                throw GatewayFailure{502, "Bad Gateway", "the upstream closed before answering"};
            }
            head.append(chunk.data(), n);
            arm(idle_timeout());
        }
        std::string rewritten;
        try {
            rewritten = guest_response_head(std::string_view(head).substr(0, end + 4));
        } catch (const EgressRefusal&) {
            throw GatewayFailure{502, "Bad Gateway", "the upstream response is not HTTP/1.x"};
        }
        answered_ = true;
        rewritten.append(head, end + 4);
        co_await write_all(guest_, rewritten);
        co_await pump(upstream_, guest_);
    }

    // --- CONNECT -------------------------------------------------------------------------------

    asio::awaitable<void> serve_connect(const RequestHead& head, std::shared_ptr<Session> self) {
        method_ = "CONNECT";
        Authority authority;
        try {
            authority = parse_authority(head.target, std::nullopt);
        } catch (const EgressRefusal&) {
            host_ = head.target.substr(0, 255);
            throw;
        }
        host_ = authority.host;
        port_ = authority.port;
        if (authority.ip_literal) {
            throw EgressRefusal{"ip literal"};
        }
        const auto rule = check_rules(authority);
        co_await connect_upstream(authority);
        arm(proxy_.options.header_timeout);
        co_await write_all(guest_, kConnectEstablished);
        answered_ = true;  // from here a refusal is a close

        auto hello = parse_client_hello(as_bytes(buffer_));
        while (hello.status == ClientHello::Status::incomplete) {
            if (buffer_.size() >= kMaxClientHelloBytes) {
                throw EgressRefusal{"malformed tls client hello"};
            }
            try {
                co_await read_guest(kHeadReadChunk);
            } catch (const SessionClosed&) {
                throw EgressRefusal{"tunnel closed before a tls client hello"};
            }
            hello = parse_client_hello(as_bytes(buffer_));
        }
        switch (hello.status) {
            case ClientHello::Status::not_tls:
                throw EgressRefusal{"tunnel payload is not tls"};
            case ClientHello::Status::malformed:
            case ClientHello::Status::incomplete:
                throw EgressRefusal{"malformed tls client hello"};
            case ClientHello::Status::complete:
                break;
        }
        if (hello.encrypted_server_name) {
            throw EgressRefusal{"encrypted client hello"};
        }
        if (hello.server_name.empty()) {
            throw EgressRefusal{"missing sni"};
        }
        const auto sni = normalize_host_name(hello.server_name);
        if (!sni || *sni != host_) {
            throw EgressRefusal{"sni mismatch"};
        }
        decide(true, "matched " + rule);
        arm(idle_timeout());
        co_await write_all(upstream_, buffer_);
        buffer_.clear();
        buffer_.shrink_to_fit();
        auto up = tunnel_direction(true, self);
        auto down = tunnel_direction(false, self);
        asio::co_spawn(guest_.get_executor(), std::move(up), asio::detached);
        co_await std::move(down);
    }

    asio::awaitable<void> tunnel_direction(bool from_guest, std::shared_ptr<Session> self) {
        (void)self;
        try {
            if (from_guest) {
                co_await pump(guest_, upstream_);
            } else {
                co_await pump(upstream_, guest_);
            }
        } catch (...) {
            finish();
        }
        if (++directions_done_ == 2) {
            finish();
        }
    }

    static std::span<const std::uint8_t> as_bytes(const std::string& text) {
        return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
    }

    // --- policy ----------------------------------------------------------------------------------

    // The text of the first rule that allows `authority`; throws the refusal otherwise.
    std::string check_rules(const Authority& authority) {
        bool host_known = false;
        for (const auto& rule : proxy_.options.rules) {
            if (rule.matches(authority.host, authority.port)) {
                return rule_text(rule);
            }
            host_known = host_known ||
                         std::any_of(rule.ports.begin(), rule.ports.end(),
                                     [&](auto port) { return rule.matches(authority.host, port); });
        }
        throw EgressRefusal{host_known ? "port not allowed" : "host not in allowlist"};
    }

    // Resolves (operator hosts file first, then the system resolver), drops every address the
    // proxy refuses, and connects to the first remaining one that answers.
    asio::awaitable<void> connect_upstream(const Authority& authority) {
        arm(proxy_.options.connect_timeout);
        connecting_ = true;
        std::vector<tcp::endpoint> candidates;
        const auto& listed = proxy_.hosts.lookup(authority.host);
        if (!listed.empty()) {
            for (const auto& address : listed) {
                candidates.emplace_back(address, authority.port);
            }
        } else {
            resolver_.emplace(guest_.get_executor());
            error_code ec;
            const auto port_text = std::to_string(authority.port);
            const auto results = co_await resolver_->async_resolve(
                authority.host, port_text, tcp::resolver::numeric_service,
                asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                throw expired_
                    ? GatewayFailure{504, "Gateway Timeout", "resolving the host timed out"}
                    : GatewayFailure{502, "Bad Gateway", "the host name did not resolve"};
            }
            for (const auto& result : results) {
                candidates.push_back(result.endpoint());
            }
        }
        std::optional<std::string_view> refused;
        std::vector<tcp::endpoint> allowed;
        for (const auto& endpoint : candidates) {
            if (const auto why = refused_address(endpoint.address(),
                                                 proxy_.options.operator_options.allow_private)) {
                refused = refused.value_or(*why);
            } else {
                allowed.push_back(endpoint);
            }
        }
        if (allowed.empty() && refused) {
            throw EgressRefusal{*refused};
        }
        if (allowed.empty()) {
            throw GatewayFailure{502, "Bad Gateway", "the host name did not resolve"};
        }
        error_code ec = asio::error::host_unreachable;
        for (const auto& endpoint : allowed) {
            if (expired_) {
                break;
            }
            error_code ignored;
            upstream_.close(ignored);
            co_await upstream_.async_connect(endpoint,
                                             asio::redirect_error(asio::use_awaitable, ec));
            if (!ec) {
                break;
            }
        }
        if (expired_) {
            throw GatewayFailure{504, "Gateway Timeout", "connecting to the host timed out"};
        }
        if (ec) {
            throw GatewayFailure{502, "Bad Gateway", "the host refused the connection"};
        }
        connecting_ = false;
        error_code ignored;
        upstream_.set_option(tcp::no_delay(true), ignored);
    }

    void decide(bool allowed, std::string reason) {
        if (decided_) {
            return;
        }
        decided_ = true;
        EgressDecision decision;
        decision.time = std::chrono::system_clock::now();
        decision.method = method_;
        decision.host = host_;
        decision.port = port_;
        decision.allowed = allowed;
        decision.reason = std::move(reason);
        // Throws when the log cannot be written: such a decision is not made. Past the log's
        // rate or size bound the decision is made and only counted (EgressLogLimits).
        proxy_.log_decision(decision);
    }

    asio::awaitable<void> answer_failure(const std::optional<std::string>& refusal,
                                         const std::optional<GatewayFailure>& failure) {
        try {
            if (refusal) {
                decide(false, *refusal);
            } else {
                decide(false, std::string(failure->why));
            }
        } catch (const std::exception& e) {
            std::fprintf(stderr, "maf-sandbox egress proxy: %s\n", e.what());
        }
        if (!answered_ && guest_.is_open()) {
            answered_ = true;
            connecting_ = false;
            arm(proxy_.options.header_timeout);
            const std::string response =
                refusal ? forbidden_response(*refusal)
                        : gateway_failure_response(failure->status, failure->phrase, failure->why);
            error_code ec;
            const auto bytes = asio::buffer(response);
            co_await asio::async_write(guest_, bytes,
                                       asio::redirect_error(asio::use_awaitable, ec));
            guest_.shutdown(tcp::socket::shutdown_send, ec);
            if (!ec) {
                co_await drain_guest();
            }
        }
        finish();
    }

    // Reads and drops what the guest still sends (a refused request's body) for a short while
    // before closing: closing with unread bytes resets the connection, and a reset can destroy
    // the refusal before the guest reads it.
    asio::awaitable<void> drain_guest() {
        arm(std::min<std::chrono::milliseconds>(proxy_.options.header_timeout, kLinger));
        std::vector<char> scratch(kHeadReadChunk);
        std::size_t drained = 0;
        while (drained < kMaxLingerBytes && !finished_) {
            error_code ec;
            const auto into = asio::buffer(scratch);
            drained += co_await guest_.async_read_some(
                into, asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                break;
            }
        }
    }

    // --- I/O -------------------------------------------------------------------------------------

    // Reads until buffer_ holds a whole request head; returns its size.
    asio::awaitable<std::size_t> read_head() {
        std::size_t searched = 0;
        while (true) {
            const auto end = buffer_.find("\r\n\r\n", searched);
            if (end != std::string::npos) {
                co_return end + 4;
            }
            searched = buffer_.size() < 3 ? 0 : buffer_.size() - 3;
            if (buffer_.size() >= kMaxRequestHead) {
                method_.clear();
                throw EgressRefusal{"request head too large"};
            }
            co_await read_guest(kHeadReadChunk);
        }
    }

    // Appends up to `most` bytes from the guest to buffer_; throws SessionClosed at EOF or error.
    asio::awaitable<void> read_guest(std::size_t most) {
        const auto old_size = buffer_.size();
        buffer_.resize(old_size + most);
        error_code ec;
        const auto into = asio::buffer(buffer_.data() + old_size, most);
        const auto n =
            co_await guest_.async_read_some(into, asio::redirect_error(asio::use_awaitable, ec));
        buffer_.resize(old_size + (ec ? 0 : n));
        if (ec) {
            throw SessionClosed{};
        }
    }

    template <typename Buffer>
    asio::awaitable<void> write_all(tcp::socket& to, const Buffer& data) {
        error_code ec;
        const auto bytes = asio::buffer(data);
        co_await asio::async_write(to, bytes, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            throw SessionClosed{};
        }
    }

    // Relays `from` to `to` until `from` ends, then half-closes `to`; every piece moved pushes
    // the idle deadline.
    asio::awaitable<void> pump(tcp::socket& from, tcp::socket& to) {
        const auto idle = idle_timeout();
        const std::function<void()> progress = [this, idle] { arm(idle); };
        try {
            co_await relay_until_eof(from, to, progress);
        } catch (const boost::system::system_error&) {
            throw SessionClosed{};
        }
    }

    // --- deadlines -------------------------------------------------------------------------------

    std::chrono::milliseconds idle_timeout() const { return proxy_.options.idle_timeout; }

    // Moves the session's one deadline. Pushing it later costs nothing (the watchdog re-arms when
    // it wakes); pulling it earlier wakes the watchdog now.
    void arm(std::chrono::milliseconds duration) {
        deadline_ = Clock::now() + duration;
        if (deadline_ < timer_.expiry()) {
            timer_.cancel();
        }
    }

    asio::awaitable<void> watch(std::shared_ptr<Session> self) {
        (void)self;
        while (!finished_) {
            timer_.expires_at(deadline_);
            error_code ec;
            co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            if (finished_ || Clock::now() < deadline_) {
                continue;
            }
            expired_ = true;
            if (connecting_) {
                // Let the session answer 504: stop only the upstream side, give the answer time.
                connecting_ = false;
                if (resolver_) {
                    resolver_->cancel();
                }
                error_code ignored;
                upstream_.close(ignored);
                deadline_ = Clock::now() + proxy_.options.header_timeout;
                continue;
            }
            finish();
        }
    }

    void finish() {
        if (finished_) {
            return;
        }
        finished_ = true;
        error_code ignored;
        if (resolver_) {
            resolver_->cancel();
        }
        guest_.shutdown(tcp::socket::shutdown_both, ignored);
        guest_.close(ignored);
        upstream_.close(ignored);
        timer_.cancel();
    }

    ProxyState& proxy_;
    tcp::socket guest_;
    tcp::socket upstream_;
    asio::steady_timer timer_;
    std::optional<tcp::resolver> resolver_;
    Clock::time_point deadline_ = Clock::now();
    std::string buffer_;  // guest bytes read and not yet consumed
    std::string method_;
    std::string host_;
    std::uint16_t port_ = 0;
    bool decided_ = false;
    bool answered_ = false;  // the guest has a response (or a tunnel): a refusal is now a close
    bool connecting_ = false;
    bool expired_ = false;
    bool finished_ = false;
    int directions_done_ = 0;
};

}  // namespace

void start_session(ProxyState& proxy, tcp::socket guest) {
    const auto executor = guest.get_executor();
    auto session = std::make_shared<Session>(proxy, std::move(guest));
    auto run = session->start(session);
    asio::co_spawn(executor, std::move(run), asio::detached);
}

}  // namespace maf_sandbox::runtime::proxy
