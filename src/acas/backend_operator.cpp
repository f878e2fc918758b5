// AcasBackend's operator commands (the CLI's ls, rm and images) and discover(): requests made
// for whoever runs them, outside any conversation and any slot.
#include <fmt/format.h>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "backend_state.hpp"
#include "images.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/net/http.hpp"

namespace maf_sandbox::acas {

namespace asio = boost::asio;

namespace {
// Operator commands act for whoever runs them, not for a conversation.
AcasCredentialRequest operator_request() {
    AcasCredentialRequest request;
    request.operation = AcasOperation::dispose_scope;
    return request;
}

// The README's import_disk_image default name: the last path segment, ':' and '@' as '-'.
std::string default_image_name(const std::string& reference) {
    auto name = reference.substr(reference.rfind('/') + 1);
    for (auto& c : name) {
        if (c == ':' || c == '@')
            c = '-';
    }
    return name.substr(0, 60);
}

bool is_ready(const DiskImageInfo& image) {
    return net::iequals(image.state, "Ready") || net::iequals(image.state, "Succeeded");
}
}  // namespace

Task<std::vector<SandboxInfo>> AcasBackend::list_sandboxes(
    std::map<std::string, std::string> labels) {
    auto state = state_;
    State::Operation operation(state);
    auto binding = co_await state->resolve(operator_request());
    auto lease = co_await state->lease(binding);
    co_return co_await lease->list_sandboxes(std::move(labels),
                                             deadline_after(state->config.client_wait));
}

Task<bool> AcasBackend::remove_sandbox(std::string id) {
    auto state = state_;
    State::Operation operation(state);
    require_path_segment(id, "the sandbox id");
    auto binding = co_await state->resolve(operator_request());
    auto lease = co_await state->lease(binding);
    const auto deadline = deadline_after(state->config.delete_timeout);
    const bool deleted = co_await lease->delete_sandbox(id, deadline);
    if (deleted)
        co_await lease->wait_until_deleted(id, state->config.poll_interval, deadline);
    co_return deleted;
}

Task<AcasBackend::Images> AcasBackend::list_images() {
    auto state = state_;
    State::Operation operation(state);
    auto binding = co_await state->resolve(operator_request());
    auto lease = co_await state->lease(binding);
    Images images;
    images.prebuilt =
        co_await lease->list_prebuilt_images(deadline_after(state->config.client_wait));
    std::sort(images.prebuilt.begin(), images.prebuilt.end());
    images.imported = co_await lease->list_disk_images(deadline_after(state->config.client_wait));
    co_return images;
}

Task<AcasBackend::ImportedImage> AcasBackend::import_disk_image(std::string image, std::string name,
                                                                Seconds timeout) {
    auto state = state_;
    State::Operation operation(state);
    if (images::names_a_prebuilt_image(image)) {
        throw InvalidArgument(fmt::format(
            "'{}' has no tag, so it names a prebuilt catalogue image that every sandbox group "
            "already has; import a repo:tag instead",
            image));
    }
    const auto reference = images::qualify(image, state->config.registry);
    if (name.empty())
        name = default_image_name(reference);
    const auto deadline = deadline_after(timeout);
    auto binding = co_await state->resolve(operator_request());
    auto lease = co_await state->lease(binding);
    ImportedImage result;
    std::optional<DiskImageInfo> pending;
    auto listed = co_await lease->list_disk_images(deadline);
    for (auto& existing : listed) {
        if (existing.base != reference || existing.id.empty() ||
            net::iequals(existing.state, "Failed")) {
            continue;
        }
        result.already_imported = true;
        if (is_ready(existing)) {
            result.image = std::move(existing);
            co_return result;
        }
        pending = std::move(existing);
    }
    DiskImageInfo current;
    if (pending) {
        current = std::move(*pending);
    } else {
        current = co_await lease->create_disk_image(reference, name, deadline);
    }
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer pause(executor);
    while (!is_ready(current)) {
        if (net::iequals(current.state, "Failed")) {
            throw AcasServiceError(
                fmt::format("the service could not import {} (disk image {} failed); check the "
                            "reference and that the group may pull from the registry",
                            reference, current.id),
                0, "DiskImageFailed");
        }
        if (SteadyClock::now() >= deadline) {
            throw Timeout(fmt::format(
                "disk image {} of {} was not Ready within {:.0f} s (state {}); run the import "
                "again later, it resumes",
                current.id, reference, timeout.count(), current.state));
        }
        pause.expires_after(
            std::chrono::duration_cast<SteadyClock::duration>(state->config.poll_interval));
        co_await pause.async_wait(asio::use_awaitable);
        auto again = co_await lease->get_disk_image(current.id, deadline);
        if (!again) {
            throw AcasServiceError(
                fmt::format("disk image {} of {} disappeared while importing; run the import "
                            "again",
                            current.id, reference),
                404, "DiskImageNotFound");
        }
        current = std::move(*again);
    }
    result.image = std::move(current);
    co_return result;
}

Task<void> AcasBackend::discover() {
    State::Operation operation(state_);
    AcasCredentialRequest request;
    request.operation = AcasOperation::acquire;
    auto binding = co_await state_->resolve(std::move(request));
    {
        auto lease = co_await state_->lease(binding);
        co_await lease->list_prebuilt_images(deadline_after(state_->config.client_wait));
    }
    // discover() may run on a short-lived io_context (the CLI's): drop its client so a later
    // context allocated at the same address never inherits a client bound to a dead one.
    auto executor = co_await asio::this_coro::executor;
    state_->pool->close_idle_on(&asio::query(executor, asio::execution::context));
}

}  // namespace maf_sandbox::acas
