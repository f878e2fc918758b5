#include "maf_sandbox/mcp/http_transport.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <map>
#include <optional>

#include "event_stream.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/mcp/http_guard.hpp"
#include "maf_sandbox/net/http_server.hpp"

namespace maf_sandbox::mcp {
namespace {

namespace json = boost::json;
using net::HttpRequest;
using net::HttpResponse;

constexpr const char* kSessionHeader = "Mcp-Session-Id";
constexpr const char* kVersionHeader = "MCP-Protocol-Version";
// Progress a slow reader has not taken yet, per event stream, before newer progress is dropped.
constexpr std::size_t kMaxHeldEventBytes = 1024 * 1024;

std::string cancelled_answer(const json::value& id) {
    json::object error{{"code", -32800}, {"message", "Request cancelled"}};
    return json::serialize(json::object{{"jsonrpc", "2.0"}, {"id", id}, {"error", error}});
}

HttpResponse json_response(int status, std::string body) {
    HttpResponse response;
    response.status = status;
    response.headers.set("Content-Type", "application/json");
    response.body = std::move(body);
    return response;
}

HttpResponse rpc_error(int status, int code, std::string_view message,
                       const json::value& id = nullptr) {
    json::object error{{"code", code}, {"message", message}};
    return json_response(
        status, json::serialize(json::object{{"jsonrpc", "2.0"}, {"id", id}, {"error", error}}));
}

// A refusal outside JSON-RPC proper (wrong path, origin, method): still a JSON-RPC error body, so
// every answer of this endpoint (and of the HTTP layer under it, problem+json) is JSON.
HttpResponse refusal(int status, std::string_view message) {
    return rpc_error(status, -32000, message);
}

// How many fields named `name` the request carries: a repeated Host, Origin or Authorization is
// ambiguous (which one would a proxy in front of us have checked?) and is refused.
std::size_t field_count(const net::HttpHeaders& headers, std::string_view name) {
    std::size_t count = 0;
    for (const auto& [key, value] : headers) {
        count += net::iequals(key, name) ? 1 : 0;
    }
    return count;
}

// A tools/call whose request carries `_meta.progressToken`: its notifications are worth a stream.
// Any other request is answered with plain JSON, which every client reads.
bool asks_for_progress(const json::object& message) {
    const auto* method = message.if_contains("method");
    const auto* params = message.if_contains("params");
    if (!message.contains("id") || method == nullptr || !method->is_string() ||
        method->get_string() != "tools/call" || params == nullptr || !params->is_object()) {
        return false;
    }
    const auto* meta = params->get_object().if_contains("_meta");
    return meta != nullptr && meta->is_object() && meta->get_object().contains("progressToken");
}

HttpResponse unauthorized() {
    auto response = refusal(401,
                            "Unauthorized: send the server's token as `Authorization: Bearer "
                            "<token>` (printed when the server started, or MAF_SANDBOX_MCP_TOKEN)");
    response.headers.set("WWW-Authenticate", "Bearer realm=\"maf-sandbox-mcp\"");
    return response;
}

}  // namespace

struct McpHttpServer::Impl : std::enable_shared_from_this<McpHttpServer::Impl> {
    struct Entry {
        std::shared_ptr<McpSession> session;
        std::uint64_t last_used = 0;  // a use counter: larger is more recent
        std::size_t in_flight = 0;
    };

    McpServer& server;
    std::size_t max_sessions;
    std::string token;
    bool allow_remote;
    std::unique_ptr<net::HttpServer> http;
    std::map<std::string, Entry> sessions;
    std::uint64_t uses = 0;
    bool stopped = false;

    Impl(McpServer& mcp, const McpHttpOptions& options)
        : server(mcp),
          max_sessions(std::max<std::size_t>(1, options.max_sessions)),
          token(options.token),
          allow_remote(options.allow_remote) {}

    // Host, then Origin (DNS rebinding), then the token; nullopt when the request may proceed.
    std::optional<HttpResponse> refuse_unless_admitted(const HttpRequest& request) const {
        const auto host = request.headers.get("Host");
        if (!host || field_count(request.headers, "Host") != 1 ||
            !host_header_allowed(*host, http->port(), allow_remote)) {
            return refusal(403,
                           "Forbidden: the Host header must name this server by a loopback "
                           "address or localhost, with its port");
        }
        if (field_count(request.headers, "Origin") > 1 ||
            !origin_allowed(request.headers.get("Origin"), *host)) {
            return refusal(403, "Forbidden: requests from this origin are not accepted");
        }
        const auto authorization = request.headers.get("Authorization");
        if (!authorization || field_count(request.headers, "Authorization") != 1 ||
            !bearer_token_matches(*authorization, token)) {
            return unauthorized();
        }
        return std::nullopt;
    }

    // Marks a session busy for one request; the entry may be gone (DELETE) when it ends.
    struct Busy {
        Impl& impl;
        std::string id;
        Busy(Impl& i, std::string session_id) : impl(i), id(std::move(session_id)) {
            if (auto it = impl.sessions.find(id); it != impl.sessions.end()) {
                ++it->second.in_flight;
                it->second.last_used = ++impl.uses;
            }
        }
        ~Busy() {
            if (auto it = impl.sessions.find(id); it != impl.sessions.end()) {
                --it->second.in_flight;
                it->second.last_used = ++impl.uses;
            }
        }
        Busy(const Busy&) = delete;
        Busy& operator=(const Busy&) = delete;
    };

    // Makes room for one more session: ends the least recently used idle one. False when every
    // session has a request in flight.
    Task<bool> make_room() {
        while (sessions.size() >= max_sessions) {
            auto oldest = sessions.end();
            for (auto it = sessions.begin(); it != sessions.end(); ++it) {
                if (it->second.in_flight == 0 &&
                    (oldest == sessions.end() || it->second.last_used < oldest->second.last_used)) {
                    oldest = it;
                }
            }
            if (oldest == sessions.end()) {
                co_return false;
            }
            auto session = oldest->second.session;
            sessions.erase(oldest);
            co_await session->close();
        }
        co_return true;
    }

    Task<HttpResponse> handle(HttpRequest request) {
        auto self = shared_from_this();
        const auto path = request.target.substr(0, request.target.find('?'));
        if (path != kMcpPath) {
            co_return refusal(404, fmt::format("Not found: the MCP endpoint is {}", kMcpPath));
        }
        if (auto refused = refuse_unless_admitted(request)) {
            co_return std::move(*refused);
        }
        if (net::iequals(request.method, "POST")) {
            co_return co_await post(std::move(request));
        }
        if (net::iequals(request.method, "DELETE")) {
            co_return co_await end_session(request);
        }
        auto refused = refusal(405, "Method not allowed: use POST, or DELETE to end a session");
        refused.headers.set("Allow", "POST, DELETE");
        co_return refused;
    }

    Task<HttpResponse> post(HttpRequest request) {
        if (stopped) {
            co_return rpc_error(503, -32000, "The server is shutting down");
        }
        if (auto version = request.headers.get(kVersionHeader)) {
            const auto& versions = supported_protocol_versions();
            if (std::find(versions.begin(), versions.end(), *version) == versions.end()) {
                co_return rpc_error(400, -32600,
                                    fmt::format("Bad Request: unsupported {} '{}'", kVersionHeader,
                                                version->substr(0, 40)));
            }
        }
        boost::system::error_code parse_error;
        const auto message = json::parse(request.body, parse_error);
        if (parse_error) {
            co_return rpc_error(400, -32700, "Parse error: the body is not valid JSON");
        }
        const auto* object = message.if_object();
        const bool is_request =
            object && object->if_contains("id") && object->if_contains("method");
        const bool is_initialize = is_request && object->at("method").is_string() &&
                                   object->at("method").get_string() == "initialize";
        const auto session_id = request.headers.get(kSessionHeader);

        std::shared_ptr<McpSession> session;
        bool fresh = false;
        if (is_initialize && !session_id) {
            const bool room = co_await make_room();
            if (!room) {
                co_return rpc_error(
                    503, -32000,
                    fmt::format("Too many sessions: all {} are busy; end one with DELETE {} or "
                                "retry later",
                                max_sessions, kMcpPath));
            }
            session = server.open_session();
            fresh = true;
        } else if (!session_id) {
            co_return rpc_error(400, -32000,
                                fmt::format("Bad Request: the {} header is required; send "
                                            "initialize first to start a session",
                                            kSessionHeader));
        } else {
            auto it = sessions.find(*session_id);
            if (it == sessions.end()) {
                co_return rpc_error(404, -32001,
                                    "Session not found: it ended or never existed; initialize "
                                    "a new session");
            }
            session = it->second.session;
        }

        if (!fresh && object != nullptr && asks_for_progress(*object) &&
            detail::accepts_event_stream(request.headers.get("Accept"))) {
            co_return co_await answer_as_events(session, std::move(request.body), object->at("id"));
        }
        std::optional<Busy> busy;
        if (!fresh) {
            busy.emplace(*this, session->id());
        }
        auto reply = co_await session->handle(std::move(request.body));
        if (fresh) {
            const bool accepted = reply && json::parse(*reply).as_object().contains("result");
            if (!accepted) {
                co_await session->close();
                co_return json_response(400, reply.value_or("{}"));
            }
            // Another initialize may have filled the room while this one ran.
            const bool room = co_await make_room();
            if (!room) {
                co_await session->close();
                co_return rpc_error(
                    503, -32000,
                    fmt::format("Too many sessions: all {} are busy; end one with DELETE {} or "
                                "retry later",
                                max_sessions, kMcpPath));
            }
            sessions[session->id()] = Entry{session, ++uses, 0};
        }
        HttpResponse response;
        if (reply) {
            response = json_response(200, std::move(*reply));
        } else if (is_request) {
            // The request was cancelled: the protocol sends no result, HTTP still needs an answer.
            response = json_response(200, cancelled_answer(object->at("id")));
        } else {
            response.status = 202;
        }
        response.headers.set(kSessionHeader, session->id());
        co_return response;
    }

    // A tools/call answered as server-sent events: the response starts at once and the call runs
    // beside it, its progress notifications events as they happen, its answer the last event.
    Task<HttpResponse> answer_as_events(std::shared_ptr<McpSession> session, std::string body,
                                        json::value id) {
        auto executor = co_await boost::asio::this_coro::executor;
        auto events = std::make_shared<detail::EventStream>(executor, kMaxHeldEventBytes);
        boost::asio::co_spawn(
            executor,
            run_for_events(shared_from_this(), session, std::move(body), std::move(id), events),
            boost::asio::detached);
        HttpResponse response;
        response.status = 200;
        response.headers.set("Content-Type", "text/event-stream");
        response.headers.set("Cache-Control", "no-cache");
        response.headers.set("Transfer-Encoding", "chunked");
        response.headers.set(kSessionHeader, session->id());
        response.body_stream = std::move(events);
        co_return response;
    }

    // A client that disconnects does not cancel its call (the protocol says so; it cancels with
    // notifications/cancelled): the call runs on, and what it sends goes nowhere.
    static Task<void> run_for_events(std::shared_ptr<Impl> self,
                                     std::shared_ptr<McpSession> session, std::string body,
                                     json::value id, std::weak_ptr<detail::EventStream> events) {
        Busy busy(*self, session->id());
        auto related = [events](std::string message) {
            if (auto stream = events.lock()) {
                stream->notify(std::move(message));
            }
        };
        std::string answer;
        try {
            auto reply = co_await session->handle(std::move(body), related);
            answer = reply ? std::move(*reply) : cancelled_answer(id);
        } catch (...) {
            answer = cancelled_answer(id);
        }
        if (auto stream = events.lock()) {
            stream->respond(std::move(answer));
        }
    }

    Task<HttpResponse> end_session(const HttpRequest& request) {
        const auto session_id = request.headers.get(kSessionHeader);
        if (!session_id) {
            co_return refusal(
                400, fmt::format("Bad Request: the {} header is required", kSessionHeader));
        }
        auto it = sessions.find(*session_id);
        if (it == sessions.end()) {
            co_return rpc_error(404, -32001, "Session not found");
        }
        auto session = it->second.session;
        sessions.erase(it);
        co_await session->close();
        co_return json_response(200, "{}");
    }
};

McpHttpServer::McpHttpServer(boost::asio::any_io_executor executor, McpServer& server,
                             McpHttpOptions options)
    : impl_(std::make_shared<Impl>(server, options)) {
    if (options.token.empty()) {
        throw InvalidArgument(fmt::format(
            "the MCP HTTP transport needs a bearer token; generate one (generate_bearer_token) or "
            "take it from {}",
            kMcpTokenEnv));
    }
    if (!options.allow_remote && !is_loopback_bind(options.host)) {
        throw InvalidArgument(fmt::format(
            "refusing to serve MCP on '{}', which is not a loopback address: anyone who can reach "
            "it could run code here. Listen on 127.0.0.1, or pass --allow-remote to serve it "
            "beyond this machine (the bearer token is then the only guard)",
            options.host.substr(0, 80)));
    }
    net::HttpServerOptions http_options;
    http_options.host = options.host;
    http_options.port = options.port;
    std::weak_ptr<Impl> weak = impl_;
    impl_->http = std::make_unique<net::HttpServer>(
        std::move(executor), http_options, [weak](HttpRequest request) -> Task<HttpResponse> {
            auto impl = weak.lock();
            if (!impl) {
                co_return rpc_error(503, -32000, "The server is shutting down");
            }
            co_return co_await impl->handle(std::move(request));
        });
}

McpHttpServer::~McpHttpServer() = default;

std::uint16_t McpHttpServer::start() {
    return impl_->http->start();
}
std::uint16_t McpHttpServer::port() const {
    return impl_->http->port();
}
std::size_t McpHttpServer::session_count() const {
    return impl_->sessions.size();
}

Task<void> McpHttpServer::stop() {
    auto impl = impl_;
    if (impl->stopped) {
        co_return;
    }
    impl->stopped = true;
    auto sessions = std::move(impl->sessions);
    impl->sessions.clear();
    for (auto& [id, entry] : sessions) {
        co_await entry.session->close();
    }
    co_await impl->http->stop(Seconds{1.0});
}

}  // namespace maf_sandbox::mcp
