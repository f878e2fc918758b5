// executeShellCommand: {command, workingDirectory?} in, {stdout, stderr, exitCode} out.
#include "field_support.hpp"
#include "maf_sandbox/core/utf8.hpp"
#include "request_values.hpp"
#include "routes.hpp"
#include "wire_format.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;

Task<net::HttpResponse> serve_exec(const RouteContext& context) {
    const auto body = parse_object_body(context.request().body, false);
    // No timeout, env, user or stdin fields exist (reference 4.4): refused, not ignored.
    refuse_unknown_fields(body, {"command", "workingDirectory"}, "the executeShellCommand body");
    const auto* command = body.if_contains("command");
    if (command == nullptr || !command->is_string()) {
        throw invalid_body("'command' is required and must be a string.");
    }
    if (const auto* wd = body.if_contains("workingDirectory");
        wd != nullptr && !wd->is_null() && !wd->is_string()) {
        throw invalid_body("'workingDirectory' must be a string (an absolute path).");
    }
    ShellCommand shell;
    shell.command = std::string(command->as_string());
    shell.working_directory = string_field(body, "workingDirectory");
    if (!shell.working_directory.empty() && shell.working_directory.front() != '/') {
        throw invalid_body("'workingDirectory' must be an absolute path.");
    }
    const auto result = co_await context.service.exec(context.id(), std::move(shell));
    co_return json_response(200, json::object{{"stdout", replace_invalid_utf8(result.stdout_text)},
                                              {"stderr", replace_invalid_utf8(result.stderr_text)},
                                              {"exitCode", result.exit_code}});
}

}  // namespace maf_sandbox::emulator
