#include "tools.hpp"

#include <fmt/format.h>

#include <boost/json/array.hpp>
#include <boost/json/string.hpp>

namespace maf_sandbox::mcp::detail {
namespace {

namespace json = boost::json;

bool has_structured_content(std::string_view protocol_version) {
    // structuredContent and outputSchema arrived in 2025-06-18; older clients get text only.
    return protocol_version >= std::string_view("2025-06-18");
}

json::object annotations(std::string title, const SandboxSpec& spec) {
    json::object hints;
    hints["title"] = std::move(title);
    hints["readOnlyHint"] = false;
    // The command only changes its own sandbox, never the host's world.
    hints["destructiveHint"] = false;
    hints["idempotentHint"] = false;
    hints["openWorldHint"] = spec->egress != Egress::closed;
    return hints;
}

json::object output_schema() {
    json::object string_type{{"type", "string"}};
    json::object properties;
    properties["backend"] = string_type;
    properties["isolation"] = string_type;
    properties["egress"] = string_type;
    properties["exit_code"] = json::object{{"type", "integer"}};
    properties["stdout"] = string_type;
    properties["stderr"] = string_type;
    properties["landed"] = json::object{{"type", "array"}, {"items", string_type}};
    properties["error"] = string_type;
    properties["dropped_bytes"] = json::object{{"type", "integer"}};
    properties["sandbox_replaced"] = json::object{{"type", "boolean"}};
    json::object output_file{{"type", "object"}};
    output_file["properties"] = json::object{{"name", string_type},
                                             {"mimeType", string_type},
                                             {"size", json::object{{"type", "integer"}}},
                                             {"uri", string_type},
                                             {"landed_as", string_type}};
    properties["outputs"] = json::object{{"type", "array"}, {"items", std::move(output_file)}};
    json::object schema;
    schema["type"] = "object";
    schema["properties"] = std::move(properties);
    schema["required"] = json::array{"backend", "isolation", "egress"};
    return schema;
}

json::object definition(std::string name, std::string title, std::string description,
                        json::object input_schema, const SandboxSpec& spec,
                        std::string_view protocol_version) {
    json::object tool;
    tool["name"] = std::move(name);
    tool["title"] = title;
    tool["description"] = std::move(description);
    tool["inputSchema"] = std::move(input_schema);
    if (has_structured_content(protocol_version)) {
        tool["outputSchema"] = output_schema();
    }
    tool["annotations"] = annotations(std::move(title), spec);
    return tool;
}

std::optional<InvalidParams> unknown_member(const json::object& arguments,
                                            std::initializer_list<std::string_view> allowed,
                                            std::string_view tool, std::string_view takes) {
    for (const auto& member : arguments) {
        bool known = false;
        for (auto name : allowed) {
            known = known || member.key() == name;
        }
        if (!known) {
            return InvalidParams{fmt::format("{} takes only {}; unknown argument '{}'", tool, takes,
                                             std::string_view(member.key()).substr(0, 120))};
        }
    }
    return std::nullopt;
}

}  // namespace

static std::string egress_phrase(const SandboxSpec& spec) {
    switch (spec->egress) {
        case Egress::closed:
            return "egress closed: no network access";
        case Egress::allowlist: {
            std::string hosts;
            for (const auto& host : spec->egress_allow) {
                hosts += hosts.empty() ? "" : ", ";
                hosts += host;
            }
            return fmt::format("egress allowlist: only {} reachable", hosts);
        }
        case Egress::unrestricted:
            return "egress unrestricted";
    }
    return "egress unknown";
}

std::string sandbox_phrase(const kinds::ResultProvenance& provenance, const SandboxSpec& spec) {
    return fmt::format("backend {}, isolation {}, {}", provenance.backend,
                       to_string(provenance.isolation), egress_phrase(spec));
}

json::object execute_code_definition(const kinds::CodeActTool& tool,
                                     std::string_view protocol_version) {
    std::string description = fmt::format(
        "Runs a Python 3 program in a sandbox ({}). The program runs as `python3 program.py` in "
        "a fresh working directory of its own, which is removed after the call. Returns the "
        "program's stdout, stderr and exit code; output over {} bytes per stream is refused, not "
        "truncated, and the program is stopped after {:g} seconds.",
        sandbox_phrase(tool.provenance(), tool.spec()), tool.config().sandbox.max_output_bytes,
        tool.config().sandbox.timeout.count());
    description +=
        " input_files copies files from the host's file store into the working directory under "
        "the same names; a name the store does not list is refused.";
    std::string names;
    for (const auto& output : tool.config().outputs) {
        names += names.empty() ? "" : ", ";
        names += output.path;
    }
    for (const auto& pattern : tool.config().output_patterns) {
        names += names.empty() ? "" : ", ";
        names += pattern;
    }
    if (!names.empty()) {
        description += fmt::format(
            " Files the program writes in its working directory matching {} are returned.", names);
    }
    const auto& caps = tool.spec()->files_out;
    if (tool.config().outputs_per_call) {
        description += fmt::format(
            " 'outputs' names more files to return, by name or glob relative to the working "
            "directory (e.g. [\"*.png\", \"out.csv\"]); links are not followed.");
    }
    if (!names.empty() || tool.config().outputs_per_call) {
        description += fmt::format(
            " Returned files come back after a successful run: images (png, jpeg, gif, webp, "
            "svg) as image content, every file as a resource link readable with resources/read; "
            "at most {} files, {} bytes each and {} bytes per call, else none is returned.",
            caps.max_files, caps.max_bytes_per_file, caps.max_total_bytes);
    }
    json::object properties;
    properties["code"] =
        json::object{{"type", "string"}, {"description", "The complete Python 3 program to run."}};
    properties["input_files"] = json::object{
        {"type", "array"},
        {"items", json::object{{"type", "string"}}},
        {"description",
         "Names of files in the host's file store to copy into the working directory."}};
    if (tool.config().outputs_per_call) {
        properties["outputs"] = json::object{
            {"type", "array"},
            {"items", json::object{{"type", "string"}}},
            {"description",
             "Names or globs (*, ?, [...]) of files the program writes in its working directory "
             "to return, e.g. [\"*.png\", \"out.csv\"]."}};
    }
    json::object schema;
    schema["type"] = "object";
    schema["properties"] = std::move(properties);
    schema["required"] = json::array{"code"};
    schema["additionalProperties"] = false;
    return definition(kinds::kCodeActToolName, "Execute Python code in a sandbox",
                      std::move(description), std::move(schema), tool.spec(), protocol_version);
}

json::object run_shell_definition(const kinds::ShellTool& tool, std::string_view protocol_version) {
    auto description = fmt::format(
        "Runs a POSIX shell command line (sh -c) in a sandbox ({}), in a fresh working directory "
        "of its own that is removed after the call. Returns the command's stdout, stderr and "
        "exit code; output over {} bytes per stream is refused, not truncated, and the command "
        "is stopped after {:g} seconds.",
        sandbox_phrase(tool.provenance(), tool.spec()), tool.config().sandbox.max_output_bytes,
        tool.config().sandbox.timeout.count());
    json::object properties;
    properties["command"] =
        json::object{{"type", "string"}, {"description", "The shell command line to run."}};
    json::object schema;
    schema["type"] = "object";
    schema["properties"] = std::move(properties);
    schema["required"] = json::array{"command"};
    schema["additionalProperties"] = false;
    return definition(kinds::kShellToolName, "Run a shell command in a sandbox",
                      std::move(description), std::move(schema), tool.spec(), protocol_version);
}

std::variant<kinds::CodeActArguments, InvalidParams> parse_execute_code(
    const json::value* arguments) {
    if (arguments == nullptr || !arguments->is_object()) {
        return InvalidParams{"execute_code needs an arguments object with a string 'code'"};
    }
    const auto& object = arguments->get_object();
    if (auto unknown = unknown_member(object, {"code", "input_files", "outputs"}, "execute_code",
                                      "'code', 'input_files' and 'outputs'")) {
        return *unknown;
    }
    kinds::CodeActArguments parsed;
    const auto* code = object.if_contains("code");
    if (code == nullptr || !code->is_string()) {
        return InvalidParams{"execute_code needs 'code', the Python program, as a string"};
    }
    parsed.code = std::string(code->get_string());
    if (const auto* files = object.if_contains("input_files"); files && !files->is_null()) {
        if (!files->is_array()) {
            return InvalidParams{"'input_files' must be a list of file names"};
        }
        for (const auto& name : files->get_array()) {
            if (!name.is_string()) {
                return InvalidParams{"'input_files' must be a list of file names (strings)"};
            }
            parsed.input_files.emplace_back(name.get_string());
        }
    }
    if (const auto* outputs = object.if_contains("outputs"); outputs && !outputs->is_null()) {
        if (!outputs->is_array()) {
            return InvalidParams{"'outputs' must be a list of file names or globs"};
        }
        for (const auto& name : outputs->get_array()) {
            if (!name.is_string()) {
                return InvalidParams{"'outputs' must be a list of file names or globs (strings)"};
            }
            parsed.outputs.emplace_back(name.get_string());
        }
    }
    return parsed;
}

std::variant<std::string, InvalidParams> parse_run_shell(const json::value* arguments) {
    if (arguments == nullptr || !arguments->is_object()) {
        return InvalidParams{"run_shell needs an arguments object with a string 'command'"};
    }
    const auto& object = arguments->get_object();
    if (auto unknown = unknown_member(object, {"command"}, "run_shell", "'command'")) {
        return *unknown;
    }
    const auto* command = object.if_contains("command");
    if (command == nullptr || !command->is_string()) {
        return InvalidParams{"run_shell needs 'command', a shell command line, as a string"};
    }
    return std::string(command->get_string());
}

json::object call_result(const kinds::ToolResult& result, std::string_view protocol_version) {
    json::object reply;
    reply["content"] = json::array{json::object{{"type", "text"}, {"text", result.text()}}};
    if (has_structured_content(protocol_version)) {
        json::object structured;
        structured["backend"] = result.provenance.backend;
        structured["isolation"] = to_string(result.provenance.isolation);
        structured["egress"] = to_string(result.provenance.egress);
        if (result.program) {
            if (result.failure != kinds::CallFailure::output_over_cap ||
                result.program->exit_code >= 0) {
                structured["exit_code"] = result.program->exit_code;
            }
            structured["stdout"] = result.program->stdout_text;
            structured["stderr"] = result.program->stderr_text;
        }
        if (!result.landed.empty()) {
            json::array landed;
            for (const auto& line : result.landed) {
                landed.emplace_back(line);
            }
            structured["landed"] = std::move(landed);
        }
        if (!result.message.empty()) {
            structured["error"] = result.message;
        }
        if (result.failure == kinds::CallFailure::output_over_cap) {
            structured["dropped_bytes"] = result.dropped_bytes;
        }
        if (result.sandbox_replaced) {
            structured["sandbox_replaced"] = true;
        }
        reply["structuredContent"] = std::move(structured);
    }
    // A program that exited non-zero ran to completion, but it failed at what the model asked:
    // clients and models read isError to tell a failed call from a good one.
    reply["isError"] = result.is_error() || (result.program && result.program->exit_code != 0);
    return reply;
}

json::object server_failure_result(std::string_view sentence) {
    json::object reply;
    reply["content"] = json::array{json::object{{"type", "text"}, {"text", sentence}}};
    reply["isError"] = true;
    return reply;
}

}  // namespace maf_sandbox::mcp::detail
