// SandboxService: the background halves of the sandbox lifecycle. A launch runs after the create
// was answered (retrying while the disk is full), a deletion after the DELETE was answered
// (retried by the sweep when it fails), and the freezer follows stop, resume and auto-suspend.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <cerrno>
#include <cstring>

#include "egress_policy.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/off_loop.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "out_of_space.hpp"
#include "request_values.hpp"
#include "sandbox_service.hpp"
#include "timer_wait.hpp"

namespace maf_sandbox::emulator {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// A deletion that failed (the runtime could not remove the sandbox's files yet, e.g. on a full
// disk) is tried again by the lifecycle sweep after this long.
constexpr auto kDeleteRetryAfter = std::chrono::seconds(2);

}  // namespace

bool out_of_space(const std::exception& e) {
    const auto full = [](int error) { return error == ENOSPC || error == EDQUOT; };
    // The image store's free-space floor is a full disk too: space may return. The other import
    // caps refuse the archive itself, for good.
    if (const auto* cap = dynamic_cast<const runtime::ImageImportLimitExceeded*>(&e)) {
        return cap->cap() == "free space";
    }
    if (const auto* system = dynamic_cast<const SystemError*>(&e)) {
        return full(system->error_number());
    }
    if (const auto* file = dynamic_cast<const FileError*>(&e)) {
        return full(file->error_number());
    }
    if (const auto* fs = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
        return full(fs->code().value());
    }
    const std::string_view what = e.what();
    return what.find(::strerrordesc_np(ENOSPC)) != std::string_view::npos ||
           what.find(::strerrordesc_np(EDQUOT)) != std::string_view::npos;
}

void SandboxService::spawn_launch(SandboxDoc doc) {
    auto self = shared_from_this();
    if (!work_.begin_launch(doc.id)) {
        return;
    }
    asio::co_spawn(
        executor_, [self, doc]() -> Task<void> { co_await self->launch(doc); }, asio::detached);
}

Task<void> SandboxService::launch(SandboxDoc doc) {
    struct Done {
        BackgroundWork& work;
        const std::string& id;
        ~Done() { work.end_launch(id); }
    } done{work_, doc.id};
    if (const auto create_delay = options_.create_delay_ms(); create_delay > 0) {
        co_await sleep_ms(executor_, create_delay);
    }
    LaunchRequest launch;
    launch.id = doc.id;
    launch.image = doc.image;
    for (const auto& [k, v] : doc.environment) {
        if (v.is_string()) {
            launch.environment[std::string(k)] = std::string(v.as_string());
        }
    }
    launch.cpus = parse_cpu(string_field(doc.resources, "cpu"));
    launch.memory_bytes = parse_quantity(string_field(doc.resources, "memory"));
    try {
        launch.egress = egress_for(doc.egress_policy);  // validated at create
    } catch (const UnsupportedEgressPolicy&) {
        launch.egress = runtime::EgressPolicy::make(Egress::closed, {});
    }
    if (launch.egress.mode == Egress::unrestricted) {
        const auto why = runtime::egress_unavailable_reason(Egress::unrestricted);
        if (!why.empty()) {
            logger_->warn(
                "sandbox {}: defaultAction Allow cannot be enforced here ({}); it runs without "
                "network",
                doc.id, why);
            launch.egress = runtime::EgressPolicy::make(Egress::closed, {});
        }
    }
    json::object handle;
    std::string failure;
    // A launch refused for want of space is tried again (the create was accepted: it converges
    // once space returns), while the sandbox is still wanted and within kLaunchRetryWindow; any
    // other failure is final.
    const auto first_try = std::chrono::steady_clock::now();
    for (bool retrying = false;; retrying = true) {
        bool no_space = false;
        try {
            auto self = shared_from_this();
            auto job = [self, launch]() { return self->engine_->launch(launch); };
            handle = co_await off_loop(pool_, job);
            failure.clear();
        } catch (const std::exception& e) {
            failure = e.what();
            no_space = out_of_space(e);
        }
        const auto wanted = store_.sandbox(doc.id);
        if (!no_space || !wanted || wanted->state != SandboxState::creating ||
            std::chrono::steady_clock::now() - first_try > kLaunchRetryWindow) {
            break;
        }
        if (!retrying) {
            logger_->warn("sandbox {}: no space to launch it ({}); retrying until there is", doc.id,
                          failure);
        }
        co_await sleep_ms(executor_, kLaunchRetryMs);
    }
    bool orphan = false;
    // Eventual: the sandbox now runs (or failed) whether or not the disk takes the record at
    // once; the sweep persists it when it can.
    const bool known = store_.record(doc.id, [&](SandboxDoc& d) {
        if (d.state == SandboxState::deleting) {
            orphan = true;
            d.handle = handle;
            return;
        }
        d.handle = handle;
        d.state = failure.empty() ? SandboxState::running : SandboxState::failed;
        d.failure = failure;
        d.state_since = d.last_activity = unix_now();
    });
    if (!failure.empty()) {
        logger_->error("sandbox {} failed to start: {}", doc.id, failure);
    }
    if (!known || orphan) {
        // Deleted while it was being created (even if the launch failed): finish the deletion
        // now, once this launch no longer counts as in flight.
        work_.end_launch(doc.id);
        spawn_delete(doc.id, handle);
    } else if (failure.empty()) {
        logger_->info("sandbox {} is Running", doc.id);
    }
}

// Destroys the sandbox and forgets it. A destroy that fails leaves it Deleting for the sweep to
// try again (kDeleteRetryAfter): forgetting it would leak its processes and files.
void SandboxService::spawn_delete(const std::string& id, json::object handle) {
    auto self = shared_from_this();
    if (!work_.begin_delete(id)) {
        return;
    }
    asio::co_spawn(
        executor_, [self, id, handle]() -> Task<void> { co_await self->destroy(id, handle); },
        asio::detached);
}

Task<void> SandboxService::destroy(std::string id, json::object handle) {
    json::object h = std::move(handle);
    double deleting_since = unix_now();
    if (auto doc = store_.sandbox(id)) {
        if (h.empty()) {
            h = doc->handle;
        }
        deleting_since = doc->state_since;
    }
    if (!h.empty()) {
        try {
            auto self = shared_from_this();
            auto job = [self, h]() {
                self->thaw_for_delete(h);
                self->engine_->destroy(h);
            };
            co_await off_loop(pool_, job);
        } catch (const std::exception& e) {
            logger_->error("deleting sandbox {}: {}; trying again shortly", id, e.what());
            work_.end_delete(id, kDeleteRetryAfter);
            co_return;
        }
    }
    // As the service does, the sandbox stays listed as Deleting for a while (--deleting-ms),
    // during which a repeated DELETE succeeds; then GET is 404.
    const double left_ms = (deleting_since - unix_now()) * 1000.0 +
                           static_cast<double>(options_.deleting_retention.count());
    if (left_ms > 0) {
        co_await sleep_ms(executor_, static_cast<std::uint64_t>(left_ms));
    }
    store_.forget(id);
    work_.end_delete(id);
    logger_->info("sandbox {} deleted", id);
}

// A frozen guest (Stopped, Suspended) cannot act on the SIGTERM that ends PID 1, so the runtime
// waited out its 5 s grace before SIGKILL, and a v1 freezer holds even SIGKILL: the guest is
// thawed first. Under freeze_mutex_, so a stop racing the delete cannot freeze it again
// (apply_freeze skips a Deleting sandbox).
void SandboxService::thaw_for_delete(const json::object& handle) {
    std::lock_guard lock(freeze_mutex_);
    try {
        engine_->freeze(handle, false);
    } catch (const std::exception& e) {
        logger_->debug("thawing before delete: {}", e.what());  // gone or never frozen
    }
}

// Brings the guest's processes in line with the recorded state: frozen while Stopped or
// Suspended, running otherwise. Blocking; idempotent, so concurrent stop/resume converge on the
// last recorded state.
void SandboxService::apply_freeze(const std::string& id) {
    std::lock_guard lock(freeze_mutex_);
    const auto doc = store_.sandbox(id);
    if (!doc || doc->handle.empty() || doc->state == SandboxState::deleting ||
        doc->state == SandboxState::failed) {
        return;
    }
    const bool frozen = is_frozen(doc->state);
    try {
        engine_->freeze(doc->handle, frozen);
    } catch (const std::exception& e) {
        logger_->warn("sandbox {}: could not {} its processes ({}); the state changed anyway", id,
                      frozen ? "freeze" : "thaw", e.what());
    }
}

Task<void> SandboxService::offload_freeze(const std::string& id) {
    auto self = shared_from_this();
    auto job = [self, id]() { self->apply_freeze(id); };
    co_await off_loop(pool_, job);
}

}  // namespace maf_sandbox::emulator
