// An MCP server whose tools run over the in-process fake backend (scripted exec: nothing runs), for
// feeding its transports bad input.
#pragma once

#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>

#include <memory>
#include <string>
#include <vector>

#include "maf_sandbox/core/in_process.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/mcp/server.hpp"

namespace maf_sandbox::badinput {

struct McpHarness {
    McpHarness() {
        log = std::make_shared<spdlog::logger>("badinput",
                                               std::make_shared<spdlog::sinks::null_sink_mt>());
        InProcessSandboxOptions sandbox_options;
        sandbox_options.default_stdout = "ok\n";
        InProcessBackendOptions backend_options;
        backend_options.declarations.capabilities.insert(Capability::exec);
        backend_options.declarations.capabilities.insert(Capability::run_code);
        backend = std::make_shared<InProcessSandboxBackend>(
            std::make_shared<InProcessSandbox>(sandbox_options), backend_options);
        SandboxRouterOptions router_options;
        router_options.min_isolation = Isolation::none;
        router_options.log = log;
        auto router = std::make_shared<SandboxRouter>(
            std::vector<std::shared_ptr<SandboxBackend>>{backend}, router_options);
        mcp::McpServerConfig config;
        config.close_timeout = Seconds{1.0};
        server = std::make_unique<mcp::McpServer>(
            config, router,
            std::make_shared<kinds::CodeActTool>(router, kinds::CodeActConfig{}, nullptr,
                                                 std::nullopt, log),
            std::make_shared<kinds::ShellTool>(router, kinds::ShellConfig{}, log), log);
    }

    std::shared_ptr<spdlog::logger> log;
    std::shared_ptr<InProcessSandboxBackend> backend;
    std::unique_ptr<mcp::McpServer> server;
};

inline const std::string kInitialize =
    R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18",)"
    R"("capabilities":{},"clientInfo":{"name":"badinput","version":"1"}}})";

// Malformed JSON-RPC and the error code each must be answered with (id null unless valid).
struct BadMessage {
    std::string name;
    std::string text;
    int code;
};

inline std::vector<BadMessage> bad_messages() {
    using namespace std::string_literals;
    return {
        {"truncated JSON", R"({"jsonrpc":"2.0","id":1,"method":"ping")", -32700},
        {"not JSON at all", "hello world", -32700},
        {"a NUL inside JSON", "{\"jsonrpc\":\"2.0\",\0\"id\":1}"s, -32700},
        {"invalid UTF-8 in a string", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffng\"}",
         -32700},
        {"nesting deeper than the parser allows", std::string(10000, '[') + std::string(10000, ']'),
         -32700},
        {"a batch", R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])", -32600},
        {"a bare number", "42", -32600},
        {"a string", R"("ping")", -32600},
        {"null", "null", -32600},
        {"jsonrpc 1.0", R"({"jsonrpc":"1.0","id":1,"method":"ping"})", -32600},
        {"jsonrpc as a number", R"({"jsonrpc":2.0,"id":1,"method":"ping"})", -32600},
        {"method as a number", R"({"jsonrpc":"2.0","id":1,"method":7})", -32600},
        {"id as an object", R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})", -32600},
        {"id as a fraction", R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})", -32600},
        {"params as an array", R"({"jsonrpc":"2.0","id":1,"method":"ping","params":[1]})", -32602},
        {"an unknown method", R"({"jsonrpc":"2.0","id":1,"method":"rm -rf /"})", -32601},
        {"initialize without a version",
         R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5}})",
         -32602},
        {"tools/call without a name",
         R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}})", -32602},
        {"tools/call of an unknown tool",
         R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sudo"}})", -32602},
        {"run_shell with a number command",
         R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_shell","arguments":{"command":7}}})",
         -32602},
        {"execute_code with arguments as a string",
         R"json({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":"print(1)"}})json",
         -32602},
        {"execute_code with an unknown argument",
         R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"1","sandbox_key":"x"}}})",
         -32602},
    };
}

}  // namespace maf_sandbox::badinput
