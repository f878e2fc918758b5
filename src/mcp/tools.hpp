// The MCP face of the kinds (private to src/mcp): tool definitions with their JSON schemas and
// annotations, strict argument parsing, and a ToolResult as a tools/call result.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "maf_sandbox/kinds/codeact.hpp"
#include "maf_sandbox/kinds/shell.hpp"

namespace maf_sandbox::mcp::detail {

// Invalid tool arguments: answered with JSON-RPC -32602 and this message.
struct InvalidParams {
    std::string message;
};

// "backend B, isolation I, egress ...": what every tool description states.
std::string sandbox_phrase(const kinds::ResultProvenance& provenance, const SandboxSpec& spec);

boost::json::object execute_code_definition(const kinds::CodeActTool& tool,
                                            std::string_view protocol_version);
boost::json::object run_shell_definition(const kinds::ShellTool& tool,
                                         std::string_view protocol_version);

// Exactly {code: string, input_files?: [string]}; anything else (an unknown member included) is
// refused, so no argument can carry key material.
std::variant<kinds::CodeActArguments, InvalidParams> parse_execute_code(
    const boost::json::value* arguments);
// Exactly {command: string}.
std::variant<std::string, InvalidParams> parse_run_shell(const boost::json::value* arguments);

// {content: [{type: text}], structuredContent (2025-06-18 on), isError (also for a non-zero exit)}.
boost::json::object call_result(const kinds::ToolResult& result, std::string_view protocol_version);

// A call that failed inside this server (not the program): a fixed sentence, isError true.
boost::json::object server_failure_result(std::string_view sentence);

}  // namespace maf_sandbox::mcp::detail
