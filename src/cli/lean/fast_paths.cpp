#include "fast_paths.hpp"

#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "../exec_report.hpp"
#include "../exec_stream_report.hpp"
#include "../exit_status.hpp"
#include "full_cli.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/core/vocabulary.hpp"
#include "maf_sandbox/local/exec_outcome.hpp"
#include "maf_sandbox/local/shared_pool.hpp"
#include "maf_sandbox/local/warm_lookup.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "signal_dispose.hpp"

namespace maf_sandbox::cli::lean {

namespace {

// The router's check, made here only to decide: a floor above container (the default, microvm)
// or a misspelt one is the full CLI's to refuse.
bool floor_allows_local(const LeanArgs& args) {
    try {
        return meets_floor(Isolation::container, parse_isolation(args.floor));
    } catch (const InvalidArgument&) {
        return false;
    }
}

std::string work_dir_of(const runtime::SandboxRecord& record, const SandboxSpec& spec) {
    const auto* work = record.runtime.if_contains("work_dir");
    return work != nullptr ? std::string(work->as_string()) : spec.work_dir_or_default();
}

// Runs the command in the sandbox and prints its output as it comes, as the full CLI does; stdin
// is forwarded when it is not a terminal.
int exec_in(const runtime::SandboxHandle& handle, const std::string& work_dir,
            const LeanArgs& args) {
    ExecRequest request;
    request.command = args.argv;
    request.timeout = Seconds(args.timeout);
    request.max_output_bytes = args.max_output;
    request.environment = args.environment;
    request.stdin_bytes = forwarded_stdin(runtime::exec_wire::kMaxStdinBytes);
    const auto call = local::exec_call_for(std::move(request), work_dir, args.max_output);
    StreamPrinter printer;
    const auto print = [&printer](char type, std::string_view bytes) {
        printer.write(type == runtime::exec_wire::kStdout ? ExecStreamName::stdout_stream
                                                          : ExecStreamName::stderr_stream,
                      bytes);
    };
    try {
        return printer.finished(local::exec_result_of(
            runtime::call_exec(handle.socket, call, runtime::kExecGrace, print), call));
    } catch (const ExecOutputLimitExceeded& e) {
        return printer.finished(e, args.max_output);
    } catch (const SandboxOutputUnreachable& e) {
        // The caller hands an unreachable supervisor to the full CLI, which runs the command
        // again: only right when none of this run's output was printed and no stdin was taken
        // (the full CLI could not read it again).
        if (printer.printed() || !call.stdin_bytes.empty()) {
            throw Error(
                fmt::format("{} (after the command's output or stdin was partly used, so "
                            "it is not run again)",
                            e.what()));
        }
        throw;
    }
}

std::string random_thread() {
    return "run-" + random_hex(8);
}

// True once the supervisor is gone, waiting up to `patience` for a death in progress: a SIGKILL
// closes its socket before /proc shows it dead, so an exec can meet the closed socket of a
// supervisor that still looks alive. Its exit waits for every process of its PID namespace to
// end, which on a loaded machine can take seconds; only this failure path waits.
bool supervisor_ended(const runtime::SandboxHandle& handle,
                      std::chrono::milliseconds patience = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (runtime::sandbox_alive(handle)) {
        if (std::chrono::steady_clock::now() >= deadline) {
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
}

bool same_limits(const LeanArgs& args, const local::SharedPoolSettings& pool) {
    return args.image == pool.image && args.memory == pool.memory_bytes && args.pids == pool.pids &&
           args.disk == pool.disk_bytes;
}

// The registry of the default state directory, or nullopt when it cannot be opened (missing,
// not ours, not writable).
std::optional<runtime::Registry> open_registry() {
    try {
        return std::optional<runtime::Registry>(std::in_place, runtime::default_state_dir());
    } catch (const SystemError&) {
        return std::nullopt;
    }
}

}  // namespace

std::optional<int> warm_exec(const LeanArgs& args) {
    if (!floor_allows_local(args)) {
        return std::nullopt;
    }
    SandboxSpecFields fields;
    fields.kind = args.kind;
    fields.image = args.image;
    fields.requires_capabilities = {Capability::exec};
    const SandboxSpec spec(fields);
    const auto labels = sandbox_labels({args.scope, args.thread, args.agent, ""}, spec);
    // A state directory that cannot be opened is no fast path's to explain: the full CLI's
    // start-up check says why, with doctor's fix.
    auto state = open_registry();
    if (!state) {
        return std::nullopt;
    }
    runtime::Registry& registry = *state;
    // No lock: only a live sandbox is used here, and creating or reconciling one is the full
    // CLI's, under the key's lock. A dispose racing with this exec fails it as it would any
    // caller holding the sandbox.
    auto record = local::find_live(registry, labels);
    if (!record ||
        local::held_egress_policy(*record) != runtime::EgressPolicy::make(Egress::closed, {})) {
        return std::nullopt;  // to be created, or an egress conflict the full CLI reports
    }
    local::note_use(registry, *record);
    const auto handle = *local::handle_of(*record);
    try {
        return exec_in(handle, work_dir_of(*record, spec), args);
    } catch (const SandboxOutputUnreachable&) {
        // The supervisor died between the liveness check and the exec (killed, crashed), taking
        // the sandbox's PID namespace and files with it; nothing was printed yet. The full CLI
        // reconciles the key under its lock, says the sandbox was replaced and its state lost,
        // and runs the command in a new one, exactly as if it had met the dead record first (its
        // egress is closed, so nothing of a first, interrupted run can outlive the sandbox). A
        // supervisor that is still alive failed otherwise: that is reported as it is.
        if (supervisor_ended(handle)) {
            return std::nullopt;
        }
        throw;
    }
}

std::optional<int> pooled_run(const LeanArgs& args) {
    if (!floor_allows_local(args)) {
        return std::nullopt;
    }
    // A state directory that cannot be opened is no fast path's to explain: the full CLI's
    // start-up check says why, with doctor's fix.
    auto state = open_registry();
    if (!state) {
        return std::nullopt;
    }
    runtime::Registry& registry = *state;
    const auto pool = local::read_shared_pool(registry.state_dir());
    if (!pool || !same_limits(args, *pool)) {
        return std::nullopt;
    }
    SandboxSpecFields fields;
    fields.kind = "run";
    fields.image = args.image;
    fields.isolation_scope = IsolationScope::call;
    fields.requires_capabilities = {Capability::exec, Capability::files_in};
    const SandboxSpec spec(fields);
    const auto labels = sandbox_labels({"cli", random_thread(), args.agent, "run"}, spec);

    // This process owns the run's sandbox: killed by any signal, it takes the sandbox with it.
    const auto taken =
        local::take_pooled(registry, pool->signature, labels, runtime::current_process_as_owner());
    if (!taken) {
        spawn_full_cli_detached({"pool", "fill"});
        return std::nullopt;
    }
    // Disposal in two halves: every guest process is killed before `run` returns; the cgroups,
    // mounts, directory and record, which no guest code can use any more, are removed by the
    // detached filler before it tops the pool up (synchronously here if it cannot start).
    // Interrupted by SIGINT or SIGTERM, the run is disposed of whole before the process exits.
    DisposeOnSignal dispose([&](bool interrupted) {
        local::kill_recorded(*taken);
        if (interrupted || !spawn_full_cli_detached({"pool", "fill", "--reap", taken->id})) {
            if (const auto failure = local::destroy_recorded(registry, *taken)) {
                std::fprintf(stderr, "warning: disposing the run's sandbox: %s\n",
                             failure->c_str());
            }
            if (interrupted) {
                spawn_full_cli_detached({"pool", "fill"});
            }
        }
    });
    int status = kExitFailed;
    try {
        status = exec_in(*local::handle_of(*taken), work_dir_of(*taken, spec), args);
    } catch (...) {
        dispose.dispose_now();
        throw;
    }
    dispose.dispose_now();
    return status;
}

}  // namespace maf_sandbox::cli::lean
