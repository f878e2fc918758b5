#include "maf_sandbox/local/exec_outcome.hpp"

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"

namespace maf_sandbox::local {

runtime::ExecCall exec_call_for(ExecRequest request, std::string_view base_directory,
                                std::uint64_t default_max_output) {
    runtime::ExecCall call;
    if (const auto* argv = std::get_if<Argv>(&request.command)) {
        call.command = std::move(*argv);
    } else {
        call.command = std::move(std::get<std::string>(request.command));
    }
    call.cwd = resolve_working_directory(request.working_directory, base_directory);
    call.env.assign(request.environment.begin(), request.environment.end());
    call.stdin_bytes = std::move(request.stdin_bytes);
    call.max_output_bytes = request.max_output_bytes.value_or(default_max_output);
    call.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(request.timeout);
    if (call.timeout.count() <= 0) {
        throw InvalidArgument("the exec's timeout must be positive");
    }
    return call;
}

ExecResult exec_result_of(const runtime::ExecReply& reply, const runtime::ExecCall& call) {
    if (reply.status == runtime::ExecStatus::timed_out) {
        const std::chrono::duration<double> timeout = call.timeout;
        throw SandboxExecTimeout(
            fmt::format("the command ran longer than its {:.3g} s timeout; its whole process tree "
                        "was killed. Raise the timeout or make the command finish sooner",
                        timeout.count()),
            reply.stdout_head, reply.stderr_head);
    }
    if (reply.status == runtime::ExecStatus::failed) {
        throw Error(fmt::format("the sandbox could not run the command: {}", reply.message));
    }
    ExecResult result{reply.stdout_head, reply.stderr_head, reply.exit_code, reply.oom_kills};
    if (reply.oom_kills > 0) {
        result.stderr_bytes +=
            "\nmaf-sandbox: the sandbox's memory limit was reached and the kernel killed "
            "the program (out of memory)\n";
    }
    if (reply.truncated()) {
        const auto total = reply.stdout_total + reply.stderr_total;
        throw ExecOutputLimitExceeded(
            fmt::format(
                "the command wrote {} bytes (stdout {}, stderr {}), more than the {}-byte cap per "
                "stream; the head is kept and {} bytes were dropped. Raise max_output_bytes or "
                "write large output to a file",
                total, reply.stdout_total, reply.stderr_total, call.max_output_bytes,
                total - reply.stdout_head.size() - reply.stderr_head.size()),
            result.stdout_bytes, result.stderr_bytes, total, reply.exit_code);
    }
    return result;
}

}  // namespace maf_sandbox::local
