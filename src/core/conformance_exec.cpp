// EXEC (docs/protocol.md 6.4) and EGRESS (6.6) suites: commands run as given, with faithful exit
// codes and the caller's timeout; egress reaches exactly what the spec allows.
#include <fmt/format.h>

#include <chrono>

#include "conformance_support.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox {
namespace {

using conformance_detail::exception_type_name;
using conformance_detail::expect;
using conformance_detail::make_argv;
using conformance_detail::run_in_guest;
using conformance_detail::strip;

constexpr Seconds kTimeoutBound{1.0};
constexpr Seconds kTimeoutFloor{0.5};
constexpr Seconds kTimeoutCeiling{4.0};
constexpr std::string_view kHostileArgument = "a b$(echo injected)c";

Task<void> argv_runs(ProbeContext& context) {
    auto argv = make_argv({"printf", "ok-ran"});
    const auto result = co_await run_in_guest(context, std::move(argv), context.paths.work);
    expect(result.exit_code == 0 && result.stdout_bytes == "ok-ran",
           fmt::format("`printf ok-ran` exited {} with stdout '{}'", result.exit_code,
                       result.stdout_text()));
}

Task<void> exit_code_fidelity(ProbeContext& context) {
    const auto result = co_await run_in_guest(context, std::string("exit 7"), context.paths.work);
    expect(result.exit_code == 7,
           fmt::format("`exit 7` reported exit code {}, not 7", result.exit_code));
}

Task<void> argv_is_quoted(ProbeContext& context) {
    auto argv =
        make_argv({"sh", "-c", "printf '%s' \"$1\"", "probe", std::string(kHostileArgument)});
    const auto result = co_await run_in_guest(context, std::move(argv), context.paths.work);
    expect(result.exit_code == 0 && result.stdout_bytes == kHostileArgument,
           fmt::format("the hostile argument came back as '{}' (exit {}), not '{}'",
                       result.stdout_text(), result.exit_code, kHostileArgument));
}

Task<void> working_directory_honoured(ProbeContext& context) {
    auto argv = make_argv({"pwd"});
    const auto result = co_await run_in_guest(context, std::move(argv), context.paths.work);
    const auto where = strip(result.stdout_text());
    expect(where == context.paths.work,
           fmt::format("`pwd` printed '{}', not '{}'", where, context.paths.work));
}

Task<void> timeout_raises_timeout(ProbeContext& context) {
    ExecRequest request;
    request.command = make_argv({"sleep", "30"});
    request.working_directory = context.paths.work;
    request.timeout = kTimeoutBound;
    const auto started = std::chrono::steady_clock::now();
    std::string failure;
    try {
        co_await context.subject.sandbox().exec(std::move(request));
        failure = "`sleep 30` with a 1 s timeout returned instead of raising Timeout";
    } catch (const Timeout&) {
        const Seconds elapsed = std::chrono::steady_clock::now() - started;
        if (elapsed < kTimeoutFloor) {
            failure = fmt::format(
                "Timeout came after {:.2f} s, under half the bound: it was not the caller's "
                "timeout expiring",
                elapsed.count());
        } else if (elapsed > kTimeoutCeiling) {
            failure = fmt::format(
                "Timeout came after {:.2f} s for a 1 s bound: the backend ignored the caller's "
                "timeout",
                elapsed.count());
        }
    } catch (const std::exception& error) {
        failure = fmt::format("`sleep 30` with a 1 s timeout raised {} ({}), not Timeout",
                              exception_type_name(error), error.what());
    }
    expect(failure.empty(), failure);
}

// Reachable: curl exited 0 and the status code is 2xx.
Task<bool> reachable(ProbeContext& context, const std::string& url) {
    const auto command = "curl -s -o /dev/null -w '%{http_code}' --max-time 25 " + shell_quote(url);
    auto argv = make_argv({"sh", "-c", command});
    const auto result = co_await run_in_guest(context, std::move(argv), context.paths.work);
    co_return result.exit_code == 0 && strip(result.stdout_text()).starts_with("2");
}

Task<void> allowed_host_reachable(ProbeContext& context) {
    expect(context.egress.has_value(), "no egress URLs were given to the suite");
    const bool reached = co_await reachable(context, context.egress->allowed_url);
    expect(reached, fmt::format("{} is allowed but was not reachable from the guest",
                                context.egress->allowed_url));
}

Task<void> denied_host_refused(ProbeContext& context) {
    expect(context.egress.has_value(), "no egress URLs were given to the suite");
    const bool reached = co_await reachable(context, context.egress->denied_url);
    expect(!reached,
           fmt::format("{} is not allowed but the guest reached it", context.egress->denied_url));
}

const std::set<Capability> kExec{Capability::exec};

}  // namespace

const std::vector<ConformanceProbe>& exec_probes() {
    static const std::vector<ConformanceProbe> probes{
        {"an-argv-sequence-runs", kExec,
         "the positive control: a backend that runs nothing would pass the refusal probes",
         argv_runs},
        {"exit-code-fidelity", kExec,
         "callers branch on exit codes, so a backend that normalises them to 0 or 1 hides "
         "failures",
         exit_code_fidelity},
        {"argv-is-quoted", kExec,
         "an argv joined without quoting lets a model-chosen argument inject shell commands",
         argv_is_quoted},
        {"working-directory-is-honoured", kExec,
         "relative paths in commands resolve against the working directory the caller chose",
         working_directory_honoured},
        // Last on purpose: backends may discard the whole sandbox on a timeout.
        {"a-timeout-raises-timeout-error", kExec,
         "Timeout must mean exactly that the caller's bound expired, not a backend's own ceiling "
         "or an instant failure",
         timeout_raises_timeout},
    };
    return probes;
}

const std::vector<ConformanceProbe>& egress_probes() {
    static const std::vector<ConformanceProbe> probes{
        {"an-allowed-host-is-reachable", kExec,
         "the positive control: a sandbox with no network at all would pass the denial probe",
         allowed_host_reachable},
        {"a-denied-host-is-refused", kExec,
         "an allowlist that lets unlisted hosts through is no policy at all, whether refused at "
         "L3 or by a proxy",
         denied_host_refused},
    };
    return probes;
}

}  // namespace maf_sandbox
