// SandboxService: what runs without a request. At start, the state file is settled against what
// still runs; then every half second the lifecycle sweep persists pending state, resolves stuck
// sandboxes, auto-suspends idle ones and auto-deletes long-stopped ones.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <initializer_list>

#include "sandbox_service.hpp"

namespace maf_sandbox::emulator {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// A sandbox Creating this long with no launch running was left behind by one (the sweep then
// settles it); younger ones may be between their record and their launch starting.
constexpr double kStuckCreatingSeconds = 5;

double policy_seconds(const json::object& lifecycle, const char* policy,
                      std::initializer_list<const char*> keys) {
    const auto* p = lifecycle.if_contains(policy);
    if (p == nullptr || !p->is_object()) {
        return 0;
    }
    const auto& o = p->as_object();
    if (const auto* enabled = o.if_contains("enabled");
        enabled != nullptr && enabled->is_bool() && !enabled->as_bool()) {
        return 0;
    }
    for (const char* key : keys) {
        if (const auto* v = o.if_contains(key); v != nullptr && v->is_number()) {
            return v->to_number<double>();
        }
    }
    return 0;
}

}  // namespace

void SandboxService::reattach() {
    // An import the emulator was killed in the middle of is started again: its half-unpacked
    // staging directory is swept by the runtime's next import, and the image, still wanted, would
    // otherwise stay Pending for good.
    for (const auto& image : store_.disk_images()) {
        if (image.state == DiskImageState::pending) {
            logger_->warn(
                "disk image {} was being imported when the emulator stopped; importing "
                "it again",
                image.id);
            auto self = shared_from_this();
            boost::asio::co_spawn(
                executor_,
                [self, image]() -> Task<void> { co_await self->import_disk_image(image); },
                boost::asio::detached);
        }
    }
    for (const auto& doc : store_.sandboxes()) {
        if (doc.state == SandboxState::deleting) {
            spawn_delete(doc.id);
            continue;
        }
        if (doc.state == SandboxState::creating && doc.handle.empty()) {
            store_.record(doc.id, [](SandboxDoc& d) {
                d.state = SandboxState::failed;
                d.failure = "the emulator stopped while the sandbox was being created";
                d.state_since = unix_now();
            });
            continue;
        }
        if (doc.state != SandboxState::failed && !doc.handle.empty() &&
            !engine_->alive(doc.handle)) {
            logger_->warn("sandbox {} is no longer running; marking it Failed", doc.id);
            store_.record(doc.id, [](SandboxDoc& d) {
                d.state = SandboxState::failed;
                d.failure = "the sandbox's processes ended while the emulator was down";
                d.state_since = unix_now();
            });
        }
    }
}

void SandboxService::sweep() {
    persist_pending();
    resolve_stuck();
    const double now = unix_now();
    for (const auto& doc : store_.sandboxes()) {
        const double suspend =
            policy_seconds(doc.lifecycle, "autoSuspendPolicy",
                           {"interval", "idleTimeoutInSeconds", "idleTimeoutSeconds"});
        const double remove = policy_seconds(doc.lifecycle, "autoDeletePolicy",
                                             {"deleteIntervalInSeconds", "deleteIntervalSeconds"});
        if (doc.state == SandboxState::running && suspend > 0 &&
            now - doc.last_activity >= suspend) {
            store_.record(doc.id, [&](SandboxDoc& d) {
                if (d.state == SandboxState::running) {
                    d.state = SandboxState::suspended;
                    d.stopped_reason = "Idle";
                    d.stopped_at = iso_time(now);
                    d.state_since = now;
                }
            });
            logger_->info("sandbox {} auto-suspended after {}s idle", doc.id, suspend);
            auto self = shared_from_this();
            const auto id = doc.id;
            asio::post(pool_, [self, id]() { self->apply_freeze(id); });
        } else if (is_frozen(doc.state) && remove > 0 && now - doc.state_since >= remove) {
            logger_->info("sandbox {} auto-deleted after {}s stopped", doc.id, remove);
            this->remove(doc.id);
        }
    }
}

// Writes what eventual changes could not (a full disk), logging only when that changes.
void SandboxService::persist_pending() {
    std::string failure;
    const bool was_pending = store_.pending();
    if (!store_.flush(&failure)) {
        if (!state_unsaved_) {
            logger_->error("the emulator's state cannot be saved ({}); retrying", failure);
        }
        state_unsaved_ = true;
    } else if (was_pending || state_unsaved_) {
        logger_->info("the emulator's state is saved again");
        state_unsaved_ = false;
    }
}

// A sandbox Deleting with no deletion running (one failed, or the emulator accepted the DELETE
// without starting one) is deleted again; one Creating with no launch running (its launch ended
// without recording the outcome) is Running when its processes are, Failed otherwise. No restart
// needed.
void SandboxService::resolve_stuck() {
    for (const auto& doc : store_.sandboxes()) {
        if (work_.launching(doc.id)) {
            continue;
        }
        if (doc.state == SandboxState::deleting && work_.may_delete(doc.id)) {
            spawn_delete(doc.id);
        } else if (doc.state == SandboxState::creating &&
                   unix_now() - doc.state_since > kStuckCreatingSeconds) {
            const bool alive = !doc.handle.empty() && engine_->alive(doc.handle);
            logger_->warn("sandbox {} was left {}; now {}", doc.id,
                          wire_name(SandboxState::creating),
                          wire_name(alive ? SandboxState::running : SandboxState::failed));
            store_.record(doc.id, [&](SandboxDoc& d) {
                if (d.state != SandboxState::creating) {
                    return;
                }
                d.state = alive ? SandboxState::running : SandboxState::failed;
                if (!alive) {
                    d.failure = "the sandbox's launch ended without an outcome";
                }
                d.state_since = d.last_activity = unix_now();
            });
        }
    }
}

void SandboxService::start_sweeper() {
    sweeper_ = std::make_shared<asio::steady_timer>(executor_);
    auto self = shared_from_this();
    asio::co_spawn(
        executor_,
        [self]() -> Task<void> {
            while (!self->stopping_) {
                self->sweeper_->expires_after(std::chrono::milliseconds(500));
                boost::system::error_code ec;
                co_await self->sweeper_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
                if (self->stopping_) {
                    break;
                }
                try {
                    self->sweep();
                } catch (const std::exception& e) {
                    self->logger_->error("lifecycle sweep failed: {}", e.what());
                }
            }
        },
        asio::detached);
}

}  // namespace maf_sandbox::emulator
