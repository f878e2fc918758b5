#include "probes.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>

#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/core/shell_quote.hpp"
#include "wire.hpp"

namespace maf_sandbox::acas::probes {

namespace {

bool needs(const SandboxSpec& spec, Capability c) {
    return spec->requires_capabilities.count(c) > 0;
}

NoFollowStat stat_through(AcasClient& client, const std::string& id, Deadline deadline) {
    return [&client, id, deadline](std::string path) -> Task<std::optional<SandboxEntry>> {
        auto raw = co_await client.stat_raw(id, path, deadline);
        if (!raw)
            co_return std::nullopt;
        const auto entry = wire::parse_entry(*raw);
        co_return SandboxEntry{path, entry.kind, entry.size};
    };
}

// The removal probe: true (observed removal), false (completed refusal), nullopt (inconclusive).
Task<std::optional<bool>> removal_probe(AcasClient& client, const std::string& id,
                                        Deadline deadline, spdlog::logger& log) {
    const auto dir = "/.maf-authority-" + random_hex(12);
    const auto file = dir + "/probe";
    const auto stat = stat_through(client, id, deadline);
    std::optional<bool> verdict;
    std::exception_ptr failure;
    try {
        co_await client.write_file(id, file, "probe", deadline);
        const auto planted = co_await stat(file);
        if (planted && planted->kind == EntryKind::file) {
            const auto answer = co_await client.exec(id, "rm -- " + shell_quote(file),
                                                     std::string("/"), deadline, 64 * 1024);
            const auto dir_after = co_await stat(dir);
            const auto file_after = co_await stat(file);
            const bool dir_kept = dir_after && dir_after->kind == EntryKind::directory;
            if (dir_kept && !file_after && answer.exit_code == 0) {
                verdict = true;
            } else if (file_after && file_after->kind == EntryKind::file && answer.exit_code == 1) {
                verdict = false;
            }
        }
    } catch (...) {
        failure = std::current_exception();
    }
    // Cleanup runs through the file plane even after a failure, under its own bound.
    co_await boost::asio::this_coro::reset_cancellation_state();
    try {
        co_await client.delete_file(id, dir, true, deadline_after(Seconds{30.0}));
    } catch (const std::exception& e) {
        log.warn("removing the removal probe directory {} failed: {}", dir, e.what());
        if (!failure)
            throw;
    }
    if (failure)
        std::rethrow_exception(failure);
    co_return verdict;
}

}  // namespace

Task<void> run_acquire_probes(AcasBackend::State& state, AcasClient& client,
                              std::shared_ptr<HeldSandbox> held, const SandboxSpec& spec,
                              Deadline deadline) {
    const bool exec_like = needs(spec, Capability::exec) || needs(spec, Capability::host_tools) ||
                           needs(spec, Capability::files_in);
    const bool needs_removal =
        needs(spec, Capability::exec) || needs(spec, Capability::files_out) ||
        needs(spec, Capability::host_tools) || needs(spec, Capability::files_delete);
    bool capture_ok, host_tools_ok, removal_probed;
    {
        std::lock_guard lock(held->probe_mutex);
        capture_ok = held->capture_ok;
        host_tools_ok = held->host_tools_ok;
        removal_probed = held->removal_probed;
    }
    if (exec_like && !capture_ok) {
        const auto sh =
            co_await client.exec(held->id, "sh -c 'exit 0'", std::string("/"), deadline, 64 * 1024);
        if (sh.exit_code != 0) {
            throw SandboxCapabilityNotSupported(
                "the guest image has no working sh; the next acquire retries (see docs/acas.md)");
        }
        // The real capture path on a one-byte program: what every exec relies on.
        AcasSandbox sandbox(state.shared_from_this(), held);
        ExecRequest request;
        request.command = std::string("printf x");
        request.working_directory = "/";
        request.timeout = std::chrono::duration<double>(deadline - SteadyClock::now());
        request.max_output_bytes = 8;
        ExecResult result;
        try {
            result = co_await sandbox.exec(std::move(request));
        } catch (const SandboxCapabilityNotSupported&) {
            throw;
        } catch (const AcasServiceError&) {
            throw;  // the service, not the image: the host must see the real cause
        } catch (const AcasServiceUnreachable&) {
            throw;
        } catch (const AcasRequestOutcomeUnknown&) {
            throw;
        } catch (const AcasCredentialError&) {
            throw;
        } catch (const Timeout&) {
            throw;
        } catch (const std::exception& e) {
            throw SandboxCapabilityNotSupported(fmt::format(
                "the guest cannot run bounded output capture ({}); it needs sh mkdir mkfifo head "
                "cat wc dd base64 rm rmdir and a writable /tmp (see docs/acas.md)",
                e.what()));
        }
        if (result.stdout_bytes != "x" || result.exit_code != 0) {
            co_await state.invalidate(held, "the capture probe returned the wrong bytes");
            throw SandboxCapabilityNotSupported(
                "the guest's bounded output capture returned the wrong bytes; see docs/acas.md");
        }
        std::lock_guard lock(held->probe_mutex);
        held->capture_ok = true;
    }
    if (needs(spec, Capability::host_tools) && !host_tools_ok) {
        const auto missing = shell_quote("/tmp/.maf-missing-" + random_hex(12));
        const auto script = fmt::format(
            "mkdir -p / || exit 11; mv -f {m} {m}-to 2>/dev/null; [ \"$?\" -eq 1 ] || exit 12; "
            "nohup sh -c 'exit 0' </dev/null >/dev/null 2>&1 || exit 13",
            fmt::arg("m", missing));
        const auto answer =
            co_await client.exec(held->id, script, std::string("/"), deadline, 64 * 1024);
        if (answer.exit_code != 0) {
            throw SandboxCapabilityNotSupported(fmt::format(
                "the guest lacks what host_tools needs (mkdir, mv, nohup; probe exit {}); the "
                "next acquire retries",
                answer.exit_code));
        }
        std::lock_guard lock(held->probe_mutex);
        held->host_tools_ok = true;
    }
    if (needs_removal) {
        std::optional<bool> verdict;
        if (removal_probed) {
            std::lock_guard lock(held->probe_mutex);
            verdict = held->removal_verdict;
        } else {
            const auto generation = state.images.start_probe();
            verdict = co_await removal_probe(client, held->id, deadline, *state.log);
            {
                std::lock_guard lock(held->probe_mutex);
                held->removal_probed = true;
                held->removal_verdict = verdict;
            }
            // Only a completed verdict informs the image; an inconclusive one says nothing.
            if (verdict)
                state.images.record_verdict(held->image, generation, !*verdict);
        }
        if (verdict == false) {
            if (needs(spec, Capability::files_out) || needs(spec, Capability::host_tools)) {
                throw SandboxCapabilityNotSupported(
                    "the guest could not remove a probe file the file plane wrote (a non-root "
                    "image "
                    "beside root-owned files); files_out and host_tools are withdrawn for it");
            }
            state.log->warn(
                "sandbox {}: the guest could not remove a file-plane file; exec-only "
                "workloads continue",
                held->id);
        }
        if (verdict != true && needs(spec, Capability::files_delete)) {
            throw SandboxCapabilityNotSupported(
                "files_delete needs an observed guest removal and the probe did not observe one");
        }
    }
}

Task<void> ensure_storage_base(AcasBackend::State&, AcasClient& client,
                               std::shared_ptr<HeldSandbox> held, Deadline deadline) {
    const auto stat = stat_through(client, held->id, deadline);
    co_await refuse_symlinked_ancestors(stat, held->base, "/", true);
    co_await client.mkdir(held->id, held->base, deadline);
    co_await refuse_symlinked_ancestors(stat, held->base, "/", true);
    const auto entry = co_await stat(held->base);
    if (!entry || entry->kind != EntryKind::directory) {
        throw NotADirectory(
            fmt::format("the storage base {} is not a directory after mkdir", held->base), ENOTDIR);
    }
}

}  // namespace maf_sandbox::acas::probes
