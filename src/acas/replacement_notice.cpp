#include "replacement_notice.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>

#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox::acas::replacement_notice {

namespace {

// The service's label value limit: an id past it cannot be named by a label as it is.
constexpr std::size_t kLabelValueLimit = 63;
// The reason is ours, but it is read back from a guest's file: bounded and made printable.
constexpr std::size_t kReasonLimit = 1024;

// The doomed sandbox's create source as the service echoed it, else as this process made it.
bool copy_source(const SandboxInfo& info, const HeldSandbox& doomed,
                 CreateSandboxRequest& request) {
    if (info.source_disk_image_id) {
        request.disk_image_id = *info.source_disk_image_id;
    } else if (info.source_name) {
        request.prebuilt_name = *info.source_name;
    } else if (doomed.image.starts_with("prebuilt:")) {
        request.prebuilt_name = doomed.image.substr(9);
    } else if (doomed.image.starts_with("disk:") && doomed.image.size() > 5) {
        request.disk_image_id = doomed.image.substr(5);
    } else {
        return false;
    }
    return true;
}

}  // namespace

std::string marker_path(const std::string& doomed_id) {
    return "/tmp/.maf-sandbox-replaced-" + doomed_id;
}

bool replaced_by_another(const SandboxInfo& info, const std::vector<SandboxInfo>& holders) {
    for (const auto& other : holders) {
        if (other.id == info.id)
            continue;
        const auto named = other.labels.find(kReplacedFromLabel);
        if (named != other.labels.end() && named->second == info.id)
            return true;
    }
    return false;
}

Task<void> leave(AcasBackend::State& state, AcasClient& client, const HeldSandbox& doomed) {
    auto notice = state.slots.replacement(SlotKey{doomed.key, doomed.kind});
    if (!notice || notice->previous_id != doomed.id)
        co_return;  // never handed out: no caller can have left state in it
    if (doomed.id.size() > kLabelValueLimit) {
        state.log->warn(
            "sandbox {}: its id is too long for a label; only this process is told "
            "that it was replaced",
            doomed.id);
        co_return;
    }
    const auto& config = state.config;
    std::string made;
    bool complete = false;
    try {
        const auto info =
            co_await client.get_sandbox(doomed.id, deadline_after(config.client_wait));
        CreateSandboxRequest request;
        if (!info || !copy_source(*info, doomed, request)) {
            state.log->warn(
                "sandbox {}: its image is unknown, so no replacement is made ahead; "
                "only this process is told that it was replaced",
                doomed.id);
            co_return;
        }
        request.labels = info->labels;
        request.labels.erase("acquire");  // the doomed sandbox's own create nonce
        request.labels[kReplacedFromLabel] = doomed.id;
        request.allow_hosts = info->egress_hosts;
        request.auto_suspend_seconds = config.auto_suspend_seconds;
        const auto deadline = deadline_after(config.create_timeout);
        made = (co_await client.create_sandbox(request, deadline)).id;
        co_await client.wait_until_running(made, config.poll_interval, deadline);
        // The marker first: an acquire adopting the replacement from now on tells the loss.
        co_await client.write_file(made, marker_path(doomed.id), notice->reason,
                                   deadline_after(config.client_wait));
        co_await client.set_lifecycle(
            made, LifecyclePolicy{config.auto_suspend_seconds, config.auto_delete_seconds},
            deadline_after(config.client_wait));
        complete = true;
        state.log->info(
            "sandbox {} replaces the discarded {}; the key's next acquire, in any "
            "process, reports it",
            made, doomed.id);
    } catch (const boost::system::system_error&) {
        throw;
    } catch (const std::exception& e) {
        state.log->warn(
            "the replacement of sandbox {} could not be made ({}); only this process "
            "is told that it was replaced",
            doomed.id, e.what());
    }
    if (complete || made.empty())
        co_return;
    // Half made (no marker or no lifecycle policy): never left billable; the key's next acquire
    // creates afresh.
    try {
        co_await client.delete_sandbox(made, deadline_after(config.client_wait));
    } catch (const boost::system::system_error&) {
        throw;
    } catch (const std::exception& e) {
        state.log->warn("deleting the unfinished replacement {} failed: {}", made, e.what());
    }
}

Task<void> take(AcasBackend::State& state, AcasClient& client, const SandboxInfo& adopted,
                Sandbox& handle) {
    const auto named = adopted.labels.find(kReplacedFromLabel);
    if (named == adopted.labels.end())
        co_return;
    const auto& doomed = named->second;
    const auto path = marker_path(doomed);
    try {
        const auto deadline = deadline_after(state.config.client_wait);
        const auto reason = co_await client.read_file(adopted.id, path, kReasonLimit, deadline);
        if (!reason)
            co_return;  // told already
        // Only the acquire whose DELETE removed the marker tells it: concurrent adopters race on
        // one name, and exactly one of them wins it.
        if (!co_await client.delete_file(adopted.id, path, false, deadline))
            co_return;
        if (!handle.replaced()) {
            handle.mark_replaced(SandboxReplacement{doomed, bounded_utf8(*reason, kReasonLimit)});
        }
    } catch (const boost::system::system_error&) {
        throw;
    } catch (const std::exception& e) {
        state.log->warn(
            "the replacement notice of sandbox {} could not be read ({}); the key's "
            "next acquire tries again",
            adopted.id, e.what());
    }
}

}  // namespace maf_sandbox::acas::replacement_notice
