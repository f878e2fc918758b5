#include "sandboxed_call.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>

#include <algorithm>
#include <boost/asio/this_coro.hpp>
#include <exception>

#include "maf_sandbox/core/error_detail.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/reclaim.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox::kinds::detail {
namespace {

constexpr std::size_t kEchoLimit = 120;
constexpr Seconds kCancelledCleanupBound{2.0};

constexpr const char* kNoBackend =
    "No sandbox backend is configured on this server, so nothing can run. Ask the operator to "
    "configure a backend.";
constexpr const char* kPolicyRefused =
    "The sandbox is unavailable: the server's sandbox policy does not allow this workload on its "
    "backend. Do not retry; ask the operator (the reason is in the server's log).";
constexpr const char* kAcquireFailed =
    "The sandbox is unavailable right now: the backend could not provide one. Try again shortly; "
    "if it keeps failing, ask the operator (the reason is in the server's log).";
constexpr const char* kUnbound =
    "This call is not bound to a conversation, so no sandbox can be chosen for it. Call the tool "
    "from within a session.";
constexpr const char* kOverAllowance =
    "This session already holds {} sandbox(es), the most one session may hold on this server. "
    "End this session and start a new one to free them; the operator sets the limit "
    "(maf-sandbox mcp --max-session-sandboxes).";
constexpr const char* kExecFailed =
    "The sandbox failed while running the program (not the program itself). Try again; if it keeps "
    "failing, ask the operator (the reason is in the server's log).";
constexpr const char* kCallFailed =
    "The call failed inside the sandbox host. Try again; if it keeps failing, ask the operator "
    "(the "
    "reason is in the server's log).";

bool is_cancelled(const boost::asio::cancellation_state& state) {
    return state.cancelled() != boost::asio::cancellation_type::none;
}

void report(const ProgressReporter& progress, double step, std::string message) {
    if (progress) {
        progress(step, 4.0, std::move(message));
    }
}

IsolationScope effective_scope(const KindBinding& binding) {
    return stronger(binding.router->min_isolation_scope(), binding.spec->isolation_scope);
}

// The call directory goes, the conversation's sandbox stays. A backend that declares reclaim
// removes the directory its own way (the router's cleanup_call). One that withholds it (ACAS: no
// host-authority delete can be proven safe there) would have the router dispose the whole
// sandbox instead, which at conversation scope throws away what the conversation built; so the
// directory is removed by the guest itself (`rm -rf` over exec, with no more reach than the
// call's own program had).
Task<std::optional<std::string>> reclaim_call_directory(const KindBinding& binding,
                                                        const CallSite& site, Seconds timeout) {
    const auto& backend = binding.router->backend();
    const bool guest_removes = effective_scope(binding) == IsolationScope::conversation &&
                               backend && site.sandbox &&
                               !backend->declarations().declares(Capability::reclaim);
    if (!guest_removes) {
        co_return co_await binding.router->cleanup_call(site.sandbox, site.key, binding.spec,
                                                        site.call_path, timeout);
    }
    const auto work_dir =
        binding.spec->work_dir ? *binding.spec->work_dir : site.sandbox->base_directory();
    co_return co_await reclaim_guest_path(*site.sandbox, site.call_path, work_dir, timeout);
}

// The finally of a call: remove the call directory, and dispose a call-scoped sandbox. Never
// throws; failures go to the log.
Task<void> clean_up(const KindBinding& binding, const CallSite& site, bool was_cancelled,
                    SandboxAllowance* allowance) {
    const auto timeout = was_cancelled ? std::min(binding.cleanup_timeout, kCancelledCleanupBound)
                                       : binding.cleanup_timeout;
    try {
        auto reason = co_await reclaim_call_directory(binding, site, timeout);
        if (reason) {
            binding.log->warn("{}: the call directory {} was not cleaned up: {}", binding.tool_name,
                              site.call_path, *reason);
        }
        if (effective_scope(binding) == IsolationScope::call) {
            const bool done =
                co_await binding.router->dispose_kind(site.key, binding.spec->kind, timeout);
            if (!done) {
                binding.log->warn("{}: the call-scoped sandbox of call {} was not disposed",
                                  binding.tool_name, site.key.call_id);
            } else if (allowance != nullptr) {
                allowance->release(sandbox_slot(site.key, binding.spec->kind));
            }
        }
    } catch (...) {
        binding.log->warn("{}: cleaning up call {} failed: {}", binding.tool_name, site.call_path,
                          error_detail(std::current_exception()));
    }
}

// Streams only where the backend says it does: elsewhere exec answers once, at the end, and the
// host keeps its clients alive by other means.
bool streams_to(const KindBinding& binding, const OutputObserver& output) {
    const auto& backend = binding.router->backend();
    return output && backend && backend->declarations().declares(Capability::streaming_exec);
}

ExecSink observer_sink(OutputObserver output) {
    return [output = std::move(output)](ExecChunk chunk) -> Task<void> {
        output(chunk.stream, chunk.bytes);
        co_return;
    };
}

}  // namespace

std::string bounded_echo(std::string_view text) {
    return bounded_utf8(text, kEchoLimit);
}

ResultProvenance provenance_of(const KindBinding& binding) {
    ResultProvenance provenance;
    provenance.egress = binding.spec->egress;
    if (const auto& backend = binding.router->backend()) {
        provenance.backend = backend->name();
        provenance.isolation = backend->isolation();
    } else {
        provenance.backend = "none";
    }
    return provenance;
}

ToolResult failed(const KindBinding& binding, CallFailure failure, std::string message) {
    ToolResult result;
    result.provenance = provenance_of(binding);
    result.failure = failure;
    result.message = std::move(message);
    return result;
}

std::string acquire_sentence(const std::exception_ptr& error) {
    try {
        std::rethrow_exception(error);
    } catch (const NoSandboxBackend&) {
        return kNoBackend;
    } catch (const PolicyRefusal&) {
        return kPolicyRefused;
    } catch (const SandboxCapabilityNotSupported&) {
        return kPolicyRefused;
    } catch (const SandboxOsFamilyNotSupported&) {
        return kPolicyRefused;
    } catch (const SandboxIsolationScopeNotSupported&) {
        return kPolicyRefused;
    } catch (...) {
        return kAcquireFailed;
    }
}

ToolResult over_allowance_refusal(const KindBinding& binding, std::size_t cap) {
    return failed(binding, CallFailure::refused, fmt::format(fmt::runtime(kOverAllowance), cap));
}

std::optional<SandboxKey> key_for(const CallerContext& caller) {
    if (!caller.thread_id || caller.thread_id->empty()) {
        return std::nullopt;
    }
    SandboxKey key;
    key.scope = caller.scope;
    key.thread_id = *caller.thread_id;
    key.agent_dir = caller.agent_dir;
    return key;
}

ToolResult unbound_call_refusal(const KindBinding& binding) {
    return failed(binding, CallFailure::refused, kUnbound);
}

Task<ToolResult> run_in_call_directory(const KindBinding& binding, SandboxKey key, CallBody body,
                                       const ProgressReporter& progress,
                                       std::shared_ptr<SandboxAllowance> allowance) {
    // One random id names the call's guest directory. Only at call scope does it name the
    // sandbox too: at conversation scope the key stays the conversation's, so every call of the
    // conversation reaches the one sandbox and finds what the previous calls left in it.
    const auto call_id = guest_call_path("/").substr(1);
    const bool call_scoped = effective_scope(binding) == IsolationScope::call;
    key.call_id = call_scoped ? call_id : std::string();
    std::optional<SandboxAllowance::Claim> claim;
    if (allowance) {
        claim = allowance->claim(sandbox_slot(key, binding.spec->kind));
        if (!claim) {
            binding.log->warn("{}: refused a call: its session already holds {} sandbox(es)",
                              binding.tool_name, allowance->cap());
            co_return over_allowance_refusal(binding, allowance->cap());
        }
    }

    report(progress, 0.0, "acquiring the sandbox");
    CallSite site;
    site.key = key;
    std::exception_ptr acquire_error;
    try {
        site.sandbox = co_await binding.router->acquire(key, binding.spec);
    } catch (...) {
        acquire_error = std::current_exception();
    }
    if (acquire_error) {
        // Read in place: awaiting anything in a cancelled coroutine would throw first.
        if (is_cancelled(co_await boost::asio::this_coro::cancellation_state)) {
            std::rethrow_exception(acquire_error);
        }
        binding.log->error("{}: acquiring a sandbox failed: {}", binding.tool_name,
                           error_detail(acquire_error));
        co_return failed(binding, CallFailure::infrastructure, acquire_sentence(acquire_error));
    }
    if (claim) {
        claim->settle();
    }
    const auto work_dir =
        binding.spec->work_dir ? *binding.spec->work_dir : site.sandbox->base_directory();
    site.call_path = join_guest_path(normpath(work_dir), call_id);

    ToolResult result;
    result.provenance = provenance_of(binding);
    if (const auto& replaced = site.sandbox->replaced()) {
        binding.log->warn("{}: {}", binding.tool_name, replaced->reason);
        result.sandbox_replaced = true;
    }
    std::exception_ptr body_error;
    try {
        co_await body(site, result);
    } catch (...) {
        body_error = std::current_exception();
    }
    // The finally: runs on success, failure and cancellation alike.
    const bool was_cancelled = is_cancelled(co_await boost::asio::this_coro::cancellation_state);
    if (was_cancelled) {
        // A fresh cancellation state, so the cleanup's own operations are not aborted at once.
        co_await boost::asio::this_coro::reset_cancellation_state();
    }
    report(progress, 3.0, "cleaning up the call directory");
    co_await clean_up(binding, site, was_cancelled, allowance.get());
    if (body_error) {
        if (was_cancelled) {
            std::rethrow_exception(body_error);
        }
        binding.log->error("{}: the call failed: {}", binding.tool_name, error_detail(body_error));
        auto failure = failed(binding, CallFailure::infrastructure, kCallFailed);
        failure.program = std::move(result.program);
        failure.sandbox_replaced = result.sandbox_replaced;
        co_return failure;
    }
    report(progress, 4.0, "done");
    co_return result;
}

Task<bool> run_program(const KindBinding& binding, CallSite& site, Command command,
                       ToolResult& result, OutputObserver output) {
    ExecRequest request;
    request.command = std::move(command);
    request.working_directory = site.call_path;
    request.timeout = binding.timeout;
    request.max_output_bytes = binding.max_output_bytes;
    std::exception_ptr error;
    try {
        ExecResult outcome;
        if (streams_to(binding, output)) {
            outcome = co_await site.sandbox->exec_stream(std::move(request),
                                                         observer_sink(std::move(output)));
        } else {
            outcome = co_await site.sandbox->exec(std::move(request));
        }
        result.program =
            ProgramOutput{outcome.stdout_text(), outcome.stderr_text(), outcome.exit_code};
        co_return true;
    } catch (const ExecOutputLimitExceeded& over) {
        const auto shown = over.stdout_head().size() + over.stderr_head().size();
        result.failure = CallFailure::output_over_cap;
        result.dropped_bytes = over.total_bytes() > shown ? over.total_bytes() - shown : 0;
        result.message = fmt::format(
            "The program's output went over the {}-byte limit per stream and was refused, not "
            "truncated: {} bytes were dropped; the head that arrived is shown below. Print less, "
            "or write large results to a file.",
            binding.max_output_bytes, result.dropped_bytes);
        result.program = ProgramOutput{replace_invalid_utf8(over.stdout_head()),
                                       replace_invalid_utf8(over.stderr_head()), over.exit_code()};
        co_return false;
    } catch (const Timeout& timeout) {
        result.failure = CallFailure::timed_out;
        result.message = fmt::format(
            "The program did not finish within {:g} seconds and was stopped. Make it do less work "
            "per call, or ask the operator for a longer timeout.",
            binding.timeout.count());
        // What it printed before the deadline, where the backend kept it: often the clue to why.
        if (const auto* partial = dynamic_cast<const SandboxExecTimeout*>(&timeout)) {
            result.program = ProgramOutput{replace_invalid_utf8(partial->stdout_head()),
                                           replace_invalid_utf8(partial->stderr_head()), -1};
        }
        co_return false;
    } catch (...) {
        error = std::current_exception();
    }
    if (is_cancelled(co_await boost::asio::this_coro::cancellation_state)) {
        std::rethrow_exception(error);
    }
    binding.log->error("{}: exec failed: {}", binding.tool_name, error_detail(error));
    result.failure = CallFailure::infrastructure;
    result.message = kExecFailed;
    co_return false;
}

}  // namespace maf_sandbox::kinds::detail
