// The MCP server's JSON-RPC handling (McpSession::handle) on arbitrary message texts: the input is
// split at newlines into messages, as the stdio transport frames them, and fed to one session of a
// server whose tools run over the in-process fake backend (scripted exec, nothing executes).
//
// Properties, beyond not crashing:
// - every answer is one JSON-RPC 2.0 object with an id and exactly one of result and error, and an
//   error carries a standard JSON-RPC code and a message string;
// - a well-formed request (jsonrpc "2.0", a string method, a string or integer id) is always
//   answered, with its own id; a well-formed notification (no id) is never answered;
// - closing the session afterwards finishes (it is bounded by close_timeout).
#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>

#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz_check.hpp"
#include "maf_sandbox/core/in_process.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/mcp/server.hpp"

namespace maf_sandbox::mcp {
namespace {

namespace json = boost::json;
using fuzz::require;

struct Harness {
    Harness() {
        log = std::make_shared<spdlog::logger>("fuzz",
                                               std::make_shared<spdlog::sinks::null_sink_mt>());
        InProcessSandboxOptions sandbox_options;
        sandbox_options.default_stdout = "ok\n";
        InProcessBackendOptions backend_options;
        backend_options.declarations.capabilities.insert(Capability::exec);
        backend_options.declarations.capabilities.insert(Capability::run_code);
        auto backend = std::make_shared<InProcessSandboxBackend>(
            std::make_shared<InProcessSandbox>(sandbox_options), backend_options);
        SandboxRouterOptions router_options;
        router_options.min_isolation = Isolation::none;
        router_options.log = log;
        auto router = std::make_shared<SandboxRouter>(
            std::vector<std::shared_ptr<SandboxBackend>>{backend}, router_options);
        McpServerConfig config;
        config.close_timeout = Seconds{0.5};
        server = std::make_unique<McpServer>(
            config, router,
            std::make_shared<kinds::CodeActTool>(router, kinds::CodeActConfig{}, nullptr,
                                                 std::nullopt, log),
            std::make_shared<kinds::ShellTool>(router, kinds::ShellConfig{}, log), log);
    }

    std::shared_ptr<spdlog::logger> log;
    std::unique_ptr<McpServer> server;
};

bool valid_id(const json::value& id) {
    return id.is_string() || id.is_int64() || id.is_uint64();
}

void check_answer(const std::string& message, const std::optional<std::string>& answer) {
    boost::system::error_code ec;
    const auto sent = json::parse(message, ec);
    const json::object* request = !ec && sent.is_object() ? &sent.get_object() : nullptr;
    const json::value* method = request ? request->if_contains("method") : nullptr;
    const json::value* id = request ? request->if_contains("id") : nullptr;
    const json::value* version = request ? request->if_contains("jsonrpc") : nullptr;
    const bool well_formed = version && version->is_string() && version->get_string() == "2.0" &&
                             method && method->is_string();
    if (well_formed && id && valid_id(*id)) {
        require(answer.has_value(), "a well-formed request is answered", message);
    }
    if (well_formed && !id) {
        require(!answer.has_value(), "a notification is never answered", message);
    }
    if (!answer) {
        return;
    }
    const auto reply = json::parse(*answer, ec);
    require(!ec && reply.is_object(), "an answer is one JSON object", *answer);
    const auto& object = reply.get_object();
    require(object.contains("jsonrpc") && object.at("jsonrpc") == "2.0",
            "an answer says jsonrpc 2.0", *answer);
    require(object.contains("id"), "an answer carries an id", *answer);
    require(object.contains("result") != object.contains("error"),
            "an answer has exactly one of result and error", *answer);
    if (well_formed && id && valid_id(*id)) {
        require(object.at("id") == *id, "a request is answered with its own id", *answer);
    }
    if (const auto* error = object.if_contains("error")) {
        require(error->is_object() && error->as_object().contains("code") &&
                    error->as_object().contains("message") &&
                    error->as_object().at("message").is_string(),
                "an error has a code and a message", *answer);
        const auto code = error->as_object().at("code");
        require(code.is_int64() && code.as_int64() <= -32600 && code.as_int64() >= -32700,
                "an error code is a JSON-RPC standard code", *answer);
    }
}

}  // namespace
}  // namespace maf_sandbox::mcp

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace maf_sandbox;
    // A fresh server per input keeps runs independent (the fake backend records every call).
    mcp::Harness harness;
    boost::asio::io_context io;
    auto session = harness.server->open_session();
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    std::size_t start = 0;
    while (start <= input.size()) {
        auto end = input.find('\n', start);
        if (end == std::string_view::npos) {
            end = input.size();
        }
        std::string message(input.substr(start, end - start));
        const auto answer = run_blocking(io, session->handle(message));
        mcp::check_answer(message, answer);
        start = end + 1;
    }
    run_blocking(io, session->close());
    return 0;
}
