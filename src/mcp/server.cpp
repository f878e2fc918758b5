#include "maf_sandbox/mcp/server.hpp"
#include "maf_sandbox/core/error_detail.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/multiple_exceptions.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <chrono>
#include <map>

#include "call_outputs.hpp"
#include "file_tools.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/kinds/conversation_files.hpp"
#include "maf_sandbox/kinds/sandbox_allowance.hpp"
#include "progress.hpp"
#include "session_resources.hpp"
#include "tools.hpp"

namespace maf_sandbox::mcp {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace boost::asio::experimental::awaitable_operators;

// JSON-RPC 2.0 error codes.
constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;
constexpr int kInternalError = -32603;
// MCP's code for a resources/read of a URI the server does not hold.
constexpr int kResourceNotFound = -32002;

constexpr const char* kServerFailure =
    "The sandbox server failed while handling this call. Try again; if it keeps failing, ask the "
    "operator (the reason is in the server's log).";

std::string response(const json::value& id, json::value result) {
    json::object message;
    message["jsonrpc"] = "2.0";
    message["id"] = id;
    message["result"] = std::move(result);
    return json::serialize(message);
}

std::string error_response(const json::value& id, int code, std::string_view text) {
    json::object error;
    error["code"] = code;
    error["message"] = text;
    json::object message;
    message["jsonrpc"] = "2.0";
    message["id"] = id;
    message["error"] = std::move(error);
    return json::serialize(message);
}

bool valid_id(const json::value& id) {
    return id.is_string() || id.is_int64() || id.is_uint64();
}

// An error that is the cancellation itself: Asio's operation_aborted, alone or as the first of the
// exceptions its parallel operators gather, so a client's cancellation is never logged as a fault.
bool is_cancellation(const std::exception_ptr& error) {
    try {
        std::rethrow_exception(error);
    } catch (const boost::system::system_error& e) {
        return e.code() == asio::error::operation_aborted;
    } catch (const asio::multiple_exceptions& e) {
        return is_cancellation(e.first_exception());
    } catch (...) {
        return false;
    }
}

// In-flight requests are found by their id's JSON text, so "1" and 1 stay distinct.
std::string id_key(const json::value& id) {
    return json::serialize(id);
}

}  // namespace

const std::vector<std::string>& supported_protocol_versions() {
    // What the server sends differs only by structuredContent and outputSchema (2025-06-18 on),
    // so every revision is answered in its own terms.
    static const std::vector<std::string> versions{std::string(kLatestProtocolVersion),
                                                   "2025-06-18", "2025-03-26", "2024-11-05",
                                                   "2024-10-07"};
    return versions;
}

std::string negotiate_protocol_version(std::string_view requested) {
    const auto& versions = supported_protocol_versions();
    if (std::find(versions.begin(), versions.end(), requested) != versions.end()) {
        return std::string(requested);
    }
    return std::string(kLatestProtocolVersion);
}

std::string new_session_id() {
    return random_hex(16);
}

struct McpServer::Impl {
    McpServerConfig config;
    std::shared_ptr<SandboxRouter> router;
    std::shared_ptr<kinds::CodeActTool> codeact;
    std::shared_ptr<kinds::ShellTool> shell;
    std::shared_ptr<spdlog::logger> log;
    // upload_file and download_file, into execute_code's sandbox; null when not offered.
    std::shared_ptr<kinds::ConversationFiles> files;

    bool offers(const std::string& tool) const {
        return (tool == kinds::kCodeActToolName && codeact) ||
               (tool == kinds::kShellToolName && shell) ||
               ((tool == kinds::kUploadToolName || tool == kinds::kDownloadToolName) && files);
    }

    json::object tools_list(std::string_view version) const {
        json::array tools;
        if (codeact) {
            tools.push_back(detail::execute_code_definition(*codeact, version));
        }
        if (shell) {
            tools.push_back(detail::run_shell_definition(*shell, version));
        }
        if (files) {
            tools.push_back(detail::upload_file_definition(*files, version));
            tools.push_back(detail::download_file_definition(*files, version));
        }
        return json::object{{"tools", std::move(tools)}};
    }
};

struct McpSession::Impl : std::enable_shared_from_this<McpSession::Impl> {
    std::shared_ptr<McpServer::Impl> server;
    std::string id;
    std::string version;
    bool initialized = false;
    bool closed = false;
    MessageSink sink;
    // The sandboxes this session holds, capped at config.max_session_sandboxes.
    std::shared_ptr<kinds::SandboxAllowance> allowance;
    // The files this session's calls returned, for resources/list and resources/read.
    std::shared_ptr<detail::SessionResources> resources;
    // Each call in flight waits on its trigger alongside the tool; cancelling the trigger wins
    // the race and cancels the tool, which still runs its cleanup.
    std::map<std::string, std::shared_ptr<asio::steady_timer>> in_flight;

    // A notification about one request goes where that request's answer goes (its HTTP
    // response stream), else to the session's sink.
    void notify(json::object notification, const MessageSink& related) const {
        const auto& target = related ? related : sink;
        if (target) {
            notification["jsonrpc"] = "2.0";
            target(json::serialize(notification));
        }
    }

    // The call's progress notifications, when its request carries a progress token.
    std::shared_ptr<detail::ProgressPump> progress_for(const json::object& params,
                                                       MessageSink related) {
        const auto* meta = params.if_contains("_meta");
        if (meta == nullptr || !meta->is_object()) {
            return nullptr;
        }
        const auto* token = meta->get_object().if_contains("progressToken");
        if (token == nullptr || !valid_id(*token)) {
            return nullptr;
        }
        auto send = [weak = weak_from_this(), token = *token, related = std::move(related)](
                        double progress, std::string message) {
            auto self = weak.lock();
            if (!self) {
                return;
            }
            json::object params{
                {"progressToken", token}, {"progress", progress}, {"message", std::move(message)}};
            self->notify(
                json::object{{"method", "notifications/progress"}, {"params", std::move(params)}},
                related);
        };
        const auto& config = server->config;
        return std::make_shared<detail::ProgressPump>(
            std::move(send),
            detail::ProgressLimits{config.progress_interval, config.progress_heartbeat,
                                   config.progress_message_bytes});
    }

    // The pump, when the call has one, hears the program's output as it comes (streaming
    // backends only); uploads and downloads run no program and pass none.
    kinds::CallerContext caller(const std::shared_ptr<detail::ProgressPump>& pump = nullptr) const {
        kinds::CallerContext context;
        context.scope = server->config.scope;
        context.thread_id = key_thread();
        context.agent_dir = server->config.agent_dir;
        context.allowance = allowance;
        if (pump) {
            context.output = [pump](ExecStreamName stream, std::string_view bytes) {
                pump->output(stream, bytes);
            };
        }
        return context;
    }

    const std::string& key_thread() const {
        return server->config.thread.empty() ? id : server->config.thread;
    }

    // Runs one tool; never throws except cancellation.
    Task<json::object> run_tool(std::string name, json::value arguments,
                                std::shared_ptr<detail::ProgressPump> pump) {
        kinds::ProgressReporter progress;
        if (pump) {
            progress = [pump](double, std::optional<double>, std::string message) {
                pump->stage(message);
            };
        }
        std::exception_ptr error;
        try {
            if (name == kinds::kCodeActToolName) {
                auto parsed = detail::parse_execute_code(&arguments);
                auto outputs = std::make_shared<detail::CallOutputs>(
                    detail::CallOutputsOptions{server->config.out_dir, id,
                                               server->config.max_inline_image_bytes},
                    resources);
                auto context = caller(pump);
                context.output_sink = outputs->sink();
                auto result = co_await server->codeact->execute_code(
                    std::move(context), std::move(std::get<kinds::CodeActArguments>(parsed)),
                    std::move(progress));
                auto reply = detail::call_result(result, version);
                outputs->append_to(reply, version);
                co_return reply;
            }
            if (name == kinds::kUploadToolName) {
                auto parsed =
                    std::get<detail::UploadArguments>(detail::parse_upload_file(&arguments));
                auto result = co_await server->files->upload(caller(), parsed.path,
                                                             std::move(parsed.content));
                co_return detail::file_call_result(result, parsed.path, false, version);
            }
            if (name == kinds::kDownloadToolName) {
                auto path = std::get<std::string>(detail::parse_download_file(&arguments));
                auto result = co_await server->files->download(caller(), path);
                co_return detail::file_call_result(result, path, true, version);
            }
            auto command = detail::parse_run_shell(&arguments);
            auto result = co_await server->shell->run_shell(
                caller(pump), std::move(std::get<std::string>(command)), std::move(progress));
            co_return detail::call_result(result, version);
        } catch (...) {
            error = std::current_exception();
        }
        auto state = co_await asio::this_coro::cancellation_state;
        if (state.cancelled() != asio::cancellation_type::none || is_cancellation(error)) {
            std::rethrow_exception(error);
        }
        server->log->error("session {}: {} failed: {}", id, name, error_detail(error));
        co_return detail::server_failure_result(kServerFailure);
    }

    Task<std::optional<std::string>> call_tool(json::value request_id, json::object params,
                                               MessageSink related) {
        const auto* name = params.if_contains("name");
        if (name == nullptr || !name->is_string()) {
            co_return error_response(request_id, kInvalidParams,
                                     "tools/call needs 'name', the tool to call, as a string");
        }
        const std::string tool(name->get_string());
        if (!server->offers(tool)) {
            co_return error_response(request_id, kInvalidParams,
                                     fmt::format("Unknown tool: {}", tool.substr(0, 120)));
        }
        json::value arguments = json::object{};
        if (const auto* given = params.if_contains("arguments")) {
            arguments = *given;
        }
        // Arguments are checked before anything runs, so a bad call costs no sandbox.
        if (tool == kinds::kCodeActToolName) {
            auto parsed = detail::parse_execute_code(&arguments);
            if (auto* invalid = std::get_if<detail::InvalidParams>(&parsed)) {
                co_return error_response(request_id, kInvalidParams, invalid->message);
            }
        } else if (tool == kinds::kUploadToolName) {
            auto parsed = detail::parse_upload_file(&arguments);
            if (auto* invalid = std::get_if<detail::InvalidParams>(&parsed)) {
                co_return error_response(request_id, kInvalidParams, invalid->message);
            }
        } else if (tool == kinds::kDownloadToolName) {
            auto parsed = detail::parse_download_file(&arguments);
            if (auto* invalid = std::get_if<detail::InvalidParams>(&parsed)) {
                co_return error_response(request_id, kInvalidParams, invalid->message);
            }
        } else {
            auto parsed = detail::parse_run_shell(&arguments);
            if (auto* invalid = std::get_if<detail::InvalidParams>(&parsed)) {
                co_return error_response(request_id, kInvalidParams, invalid->message);
            }
        }

        const auto key = id_key(request_id);
        if (in_flight.count(key)) {
            co_return error_response(request_id, kInvalidRequest,
                                     "a request with this id is already in flight");
        }
        auto executor = co_await asio::this_coro::executor;
        auto trigger =
            std::make_shared<asio::steady_timer>(executor, asio::steady_timer::time_point::max());
        in_flight[key] = trigger;
        auto self = shared_from_this();
        auto pump = progress_for(params, std::move(related));
        auto call = run_tool(tool, std::move(arguments), pump);
        auto cancelled = trigger->async_wait(asio::as_tuple(asio::use_awaitable));
        std::variant<json::object, std::tuple<boost::system::error_code>, std::monostate> outcome;
        if (pump) {
            // The pump never ends by itself: it stops when the call (or its cancellation) does.
            outcome = co_await (std::move(call) || std::move(cancelled) || pump->run());
        } else {
            auto plain = co_await (std::move(call) || std::move(cancelled));
            if (plain.index() == 0) {
                outcome = std::move(std::get<0>(plain));
            } else {
                outcome = std::move(std::get<1>(plain));
            }
        }
        in_flight.erase(key);
        if (outcome.index() != 0) {
            server->log->info("session {}: request {} was cancelled and cleaned up", id, key);
            co_return std::nullopt;
        }
        co_return response(request_id, std::move(std::get<0>(outcome)));
    }

    Task<std::optional<std::string>> request(json::value request_id, std::string method,
                                             json::object params, MessageSink related) {
        if (closed) {
            co_return error_response(request_id, kInvalidRequest,
                                     "this MCP session has ended; start a new session");
        }
        if (method == "initialize") {
            const auto* requested = params.if_contains("protocolVersion");
            if (requested == nullptr || !requested->is_string()) {
                co_return error_response(request_id, kInvalidParams,
                                         "initialize needs 'protocolVersion' as a string");
            }
            version = negotiate_protocol_version(requested->get_string());
            json::object result;
            result["protocolVersion"] = version;
            result["capabilities"] = json::object{
                {"tools", json::object{{"listChanged", false}}},
                {"resources", json::object{{"subscribe", false}, {"listChanged", false}}}};
            result["serverInfo"] = json::object{{"name", server->config.server_name},
                                                {"version", server->config.server_version}};
            result["instructions"] =
                "Runs code and shell commands in a sandbox. Each call gets a fresh working "
                "directory; the tool descriptions state the isolation and network access in "
                "force.";
            co_return response(request_id, std::move(result));
        }
        if (method == "ping") {
            co_return response(request_id, json::object{});
        }
        if (method == "tools/list") {
            co_return response(request_id, server->tools_list(effective_version()));
        }
        if (method == "tools/call") {
            co_return co_await call_tool(std::move(request_id), std::move(params),
                                         std::move(related));
        }
        if (method == "resources/list") {
            co_return response(request_id, resources->list());
        }
        if (method == "resources/templates/list") {
            co_return response(request_id, json::object{{"resourceTemplates", json::array{}}});
        }
        if (method == "resources/read") {
            co_return read_resource(request_id, params);
        }
        co_return error_response(request_id, kMethodNotFound,
                                 fmt::format("Method not found: {}", method.substr(0, 120)));
    }

    std::string read_resource(const json::value& request_id, const json::object& params) const {
        const auto* uri = params.if_contains("uri");
        if (uri == nullptr || !uri->is_string()) {
            return error_response(request_id, kInvalidParams,
                                  "resources/read needs 'uri', a URI from a tool result, as a "
                                  "string");
        }
        const auto* found = resources->find(uri->get_string());
        if (found == nullptr) {
            return error_response(
                request_id, kResourceNotFound,
                "Resource not found: this session holds no file at that URI (URIs belong to the "
                "session whose call returned them, and the oldest files go past its byte budget)");
        }
        return response(request_id, detail::SessionResources::read_result(*found));
    }

    std::string effective_version() const {
        return version.empty() ? std::string(kLatestProtocolVersion) : version;
    }

    void notification(const std::string& method, const json::object& params) {
        if (method == "notifications/initialized") {
            initialized = true;
        } else if (method == "notifications/cancelled") {
            const auto* request_id = params.if_contains("requestId");
            if (request_id == nullptr) {
                return;
            }
            // An unknown or finished request is ignored, as the protocol asks.
            if (auto it = in_flight.find(id_key(*request_id)); it != in_flight.end()) {
                it->second->cancel();
            }
        }
        // Other notifications carry nothing this server acts on.
    }

    Task<std::optional<std::string>> handle(std::string text, MessageSink related) {
        auto self = shared_from_this();
        boost::system::error_code parse_error;
        auto message = json::parse(text, parse_error);
        if (parse_error) {
            co_return error_response(nullptr, kParseError,
                                     "Parse error: the message is not valid JSON");
        }
        if (message.is_array()) {
            co_return error_response(nullptr, kInvalidRequest,
                                     "Invalid Request: JSON-RPC batches are not supported");
        }
        if (!message.is_object()) {
            co_return error_response(nullptr, kInvalidRequest,
                                     "Invalid Request: a message must be a JSON object");
        }
        auto& object = message.get_object();
        const auto* request_id = object.if_contains("id");
        const json::value id = request_id && valid_id(*request_id) ? *request_id : nullptr;
        const auto* jsonrpc = object.if_contains("jsonrpc");
        if (jsonrpc == nullptr || !jsonrpc->is_string() || jsonrpc->get_string() != "2.0") {
            co_return error_response(id, kInvalidRequest,
                                     "Invalid Request: 'jsonrpc' must be \"2.0\"");
        }
        const auto* method = object.if_contains("method");
        if (method == nullptr) {
            // A response from the client: this server sends no requests, so nothing awaits it.
            co_return std::nullopt;
        }
        if (!method->is_string()) {
            co_return error_response(id, kInvalidRequest,
                                     "Invalid Request: 'method' must be a string");
        }
        if (request_id && !valid_id(*request_id)) {
            co_return error_response(nullptr, kInvalidRequest,
                                     "Invalid Request: 'id' must be a string or an integer");
        }
        json::object params;
        if (const auto* given = object.if_contains("params")) {
            if (!given->is_object()) {
                if (!request_id) {
                    co_return std::nullopt;
                }
                co_return error_response(id, kInvalidParams,
                                         "Invalid params: 'params' must be an object");
            }
            params = given->get_object();
        }
        std::string name(method->get_string());
        if (!request_id) {
            notification(name, params);
            co_return std::nullopt;
        }
        std::exception_ptr error;
        try {
            co_return co_await request(id, std::move(name), std::move(params), std::move(related));
        } catch (...) {
            error = std::current_exception();
        }
        auto state = co_await asio::this_coro::cancellation_state;
        if (state.cancelled() != asio::cancellation_type::none || is_cancellation(error)) {
            std::rethrow_exception(error);
        }
        server->log->error("session {}: a request failed: {}", self->id, error_detail(error));
        co_return error_response(id, kInternalError, "Internal error; the reason is in the log");
    }

    Task<void> close() {
        if (closed) {
            co_return;
        }
        closed = true;
        auto self = shared_from_this();
        auto executor = co_await asio::this_coro::executor;
        const auto deadline = std::chrono::steady_clock::now() +
                              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  server->config.close_timeout);
        for (auto& [key, trigger] : in_flight) {
            trigger->cancel();
        }
        // Cancelled calls run their cleanup before they leave in_flight.
        asio::steady_timer poll(executor);
        while (!in_flight.empty() && std::chrono::steady_clock::now() < deadline) {
            poll.expires_after(std::chrono::milliseconds(20));
            co_await poll.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        if (!in_flight.empty()) {
            server->log->warn("session {}: {} call(s) still cleaning up at session end", id,
                              in_flight.size());
        }
        asio::steady_timer bound(executor, deadline);
        auto purge = server->router->dispose_scope(server->config.scope, key_thread());
        auto expiry = bound.async_wait(asio::as_tuple(asio::use_awaitable));
        std::variant<ScopePurge, std::tuple<boost::system::error_code>> outcome;
        std::exception_ptr error;
        try {
            outcome = co_await (std::move(purge) || std::move(expiry));
        } catch (...) {
            error = std::current_exception();
        }
        if (error) {
            server->log->warn("session {} ended; disposing its sandboxes failed: {}", id,
                              error_detail(error));
        } else if (outcome.index() == 1) {
            server->log->warn("session {} ended; disposing its sandboxes did not finish in time",
                              id);
        } else {
            const auto& purged = std::get<0>(outcome);
            if (purged.undisposed) {
                server->log->warn("session {} ended: disposed {} sandbox(es); some were not: {}",
                                  id, purged.disposed, purged.undisposed->detail);
            } else {
                server->log->info("session {} ended: disposed {} sandbox(es)", id, purged.disposed);
            }
        }
    }
};

McpSession::McpSession(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
McpSession::~McpSession() = default;
const std::string& McpSession::id() const {
    return impl_->id;
}
bool McpSession::initialized() const {
    return impl_->initialized;
}
const std::string& McpSession::protocol_version() const {
    return impl_->version;
}
void McpSession::set_message_sink(MessageSink sink) {
    impl_->sink = std::move(sink);
}

Task<std::optional<std::string>> McpSession::handle(std::string text, MessageSink related) {
    auto impl = impl_;
    co_return co_await impl->handle(std::move(text), std::move(related));
}

Task<void> McpSession::close() {
    auto impl = impl_;
    co_await impl->close();
}

McpServer::McpServer(McpServerConfig config, std::shared_ptr<SandboxRouter> router,
                     std::shared_ptr<kinds::CodeActTool> codeact,
                     std::shared_ptr<kinds::ShellTool> shell, std::shared_ptr<spdlog::logger> log)
    : impl_(std::make_shared<Impl>(Impl{std::move(config), std::move(router), std::move(codeact),
                                        std::move(shell), std::move(log), nullptr})) {
    if (!impl_->router) {
        throw InvalidArgument("the MCP server needs a router to dispose sessions' sandboxes");
    }
    if (!impl_->log) {
        throw InvalidArgument("the MCP server needs a logger");
    }
    if (impl_->config.max_session_sandboxes == 0) {
        throw InvalidArgument(
            "max_session_sandboxes is 0, so no tool call could run; give at least 1");
    }
    const auto& limits = impl_->config;
    if (limits.progress_interval.count() <= 0 || limits.progress_heartbeat.count() <= 0 ||
        limits.progress_message_bytes < 128) {
        throw InvalidArgument(
            "the progress interval and heartbeat must be positive and progress_message_bytes at "
            "least 128");
    }
    if (impl_->codeact && impl_->config.file_tools) {
        auto files = std::make_shared<kinds::ConversationFiles>(impl_->router,
                                                                impl_->codeact->spec(), impl_->log);
        if (files->keeps_files()) {
            impl_->files = std::move(files);
        }
    }
}

McpServer::~McpServer() = default;

const McpServerConfig& McpServer::config() const {
    return impl_->config;
}

std::shared_ptr<McpSession> McpServer::open_session(std::string session_id) {
    auto impl = std::make_shared<McpSession::Impl>();
    impl->server = impl_;
    impl->id = session_id.empty() ? new_session_id() : std::move(session_id);
    impl->allowance =
        std::make_shared<kinds::SandboxAllowance>(impl_->config.max_session_sandboxes);
    impl->resources =
        std::make_shared<detail::SessionResources>(impl_->config.max_session_resource_bytes);
    impl_->log->info("session {} opened", impl->id);
    return std::shared_ptr<McpSession>(new McpSession(std::move(impl)));
}

std::string McpServer::tools_list(std::string_view protocol_version) const {
    return json::serialize(impl_->tools_list(protocol_version));
}

}  // namespace maf_sandbox::mcp
