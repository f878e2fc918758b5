// SandboxService: its construction and the sandbox requests (get, list, create, delete, stop,
// resume, policies). The background halves of create and delete are in service_background.cpp.
#include <fmt/format.h>

#include "egress_policy.hpp"
#include "refusal.hpp"
#include "sandbox_service.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;

namespace {

// The runtime's form of an egressPolicy; 400 for one it cannot enforce faithfully.
runtime::EgressPolicy checked_egress(const json::object& policy) {
    try {
        return egress_for(policy);
    } catch (const UnsupportedEgressPolicy& e) {
        throw Refusal{400, "EgressPolicyNotSupported", e.what()};
    }
}

}  // namespace

SandboxService::SandboxService(boost::asio::any_io_executor executor, ServiceOptions options,
                               std::shared_ptr<spdlog::logger> logger,
                               std::unique_ptr<SandboxEngine> engine)
    : executor_(std::move(executor)),
      options_(std::move(options)),
      logger_(std::move(logger)),
      pool_(options_.worker_threads),
      store_(options_.state_dir),
      registry_(options_.state_dir),
      engine_(std::move(engine)) {
    catalogue_["host"] = "host";
    for (const auto& [name, image] : options_.aliases) {
        catalogue_[name] = image;
    }
}

SandboxService::~SandboxService() {
    stop();
}

void SandboxService::start() {
    reattach();
    start_sweeper();
}

void SandboxService::stop() {
    stopping_ = true;
    if (sweeper_) {
        sweeper_->cancel();
    }
}

SandboxDoc SandboxService::require(const std::string& id) const {
    auto doc = store_.sandbox(id);
    if (!doc) {
        throw sandbox_not_found();
    }
    return *doc;
}

// Running, touched for the idle timer; otherwise 404 / 409.
SandboxDoc SandboxService::require_running(const std::string& id) {
    std::optional<SandboxDoc> result;
    bool running = false;
    const bool known = store_.mutate_volatile(id, [&](SandboxDoc& d) {
        running = d.state == SandboxState::running;
        if (running) {
            d.last_activity = unix_now();
        }
        result = d;
    });
    if (!known) {
        throw sandbox_not_found();
    }
    if (!running) {
        throw sandbox_not_running(id);
    }
    return *result;
}

void SandboxService::check_visible(const std::string& group, const std::string& id) const {
    if (auto doc = store_.sandbox(id); doc && !in_group(doc->group, group)) {
        throw sandbox_not_found();
    }
}

SandboxDoc SandboxService::get(const std::string& id) const {
    return require(id);
}

SandboxPage SandboxService::list(const SandboxListing& listing) const {
    std::vector<SandboxDoc> matching;
    for (auto& doc : store_.sandboxes()) {
        bool ok = in_group(doc.group, listing.group);
        for (const auto& [k, v] : listing.selector) {
            auto it = doc.labels.find(k);
            if (it == doc.labels.end() || it->second != v) {
                ok = false;
                break;
            }
        }
        if (ok) {
            matching.push_back(std::move(doc));
        }
    }
    SandboxPage page;
    page.matching = matching.size();
    for (std::size_t i = listing.offset;
         i < matching.size() && page.sandboxes.size() < listing.page_size; ++i) {
        page.sandboxes.push_back(std::move(matching[i]));
    }
    return page;
}

std::string SandboxService::resolve_image(const NewSandbox& request) const {
    const auto& id = request.disk_image_id;
    if (!id.empty()) {
        auto image = store_.disk_image(id);
        if (!image || !in_group(image->group, request.group)) {
            throw Refusal{404, "DiskImageNotFound",
                          fmt::format("Disk image '{}' was not found.", id)};
        }
        if (image->state != DiskImageState::ready) {
            throw Refusal{409, "DiskImageNotReady",
                          fmt::format("Disk image '{}' is {}.", id, wire_name(image->state))};
        }
        return image->local_image;
    }
    const auto& name = request.disk_image_name;
    if (auto it = catalogue_.find(name.empty() ? "ubuntu" : name); it != catalogue_.end()) {
        return it->second;
    }
    for (const auto& image : store_.disk_images()) {
        if (!name.empty() && image.name == name && image.state == DiskImageState::ready &&
            in_group(image.group, request.group)) {
            return image.local_image;
        }
    }
    throw Refusal{404, "DiskImageNotFound",
                  fmt::format("Public disk image '{}' was not found.", name)};
}

SandboxDoc SandboxService::create(const NewSandbox& request) {
    const auto image = resolve_image(request);
    SandboxDoc doc;
    doc.id = new_guid();
    doc.group = request.group;
    doc.labels = request.labels;
    doc.created_at = iso_time(unix_now());
    doc.state_since = doc.last_activity = unix_now();
    doc.image = image;
    doc.sources_ref = request.sources_ref;
    if (auto* di = doc.sources_ref.if_contains("diskImage");
        di != nullptr && di->is_object() && di->as_object().contains("id") &&
        !di->as_object().contains("isPublic")) {
        di->as_object()["isPublic"] = false;
    }
    doc.resources = json::object{{"cpu", "1000m"}, {"memory", "2048Mi"}};
    for (const auto& [k, v] : request.resources) {
        doc.resources[k] = v;
    }
    doc.egress_policy = request.egress_policy.value_or(json::object{{"defaultAction", "Allow"}});
    checked_egress(doc.egress_policy);
    if (request.lifecycle) {
        doc.lifecycle = *request.lifecycle;
    }
    if (request.environment) {
        doc.environment = *request.environment;
    }
    store_.put_new(doc);
    logger_->info("sandbox {} created from image {} (Creating)", doc.id, image);
    spawn_launch(doc);
    return doc;
}

// Eventual (state_store.hpp): once accepted, a deletion converges even when the disk refuses
// to record it now; the sweep persists it and retries a destroy that failed.
void SandboxService::remove(const std::string& id) {
    bool already = false;
    const bool known = store_.record(id, [&](SandboxDoc& d) {
        already = d.state == SandboxState::deleting;
        d.state = SandboxState::deleting;
        if (!already) {
            d.state_since = unix_now();
        }
    });
    if (!known) {
        throw sandbox_not_found();
    }
    // A sandbox still being launched is deleted by its launch when that finishes; any
    // other is deleted now (at most one deletion runs: BackgroundWork).
    if (!work_.launching(id)) {
        spawn_delete(id);
    }
}

Task<SandboxDoc> SandboxService::stop_sandbox(const std::string& id) {
    bool running = false;
    const bool known = store_.mutate(id, [&](SandboxDoc& d) {
        running = d.state == SandboxState::running;
        if (running) {
            d.state = SandboxState::stopped;
            d.stopped_reason = "UserStopped";
            d.stopped_at = iso_time(unix_now());
            d.state_since = unix_now();
        }
    });
    if (!known) {
        throw sandbox_not_found();
    }
    if (!running) {
        throw sandbox_not_running(id);
    }
    auto answer = require(id);
    co_await offload_freeze(id);
    co_return answer;
}

Task<SandboxDoc> SandboxService::resume_sandbox(const std::string& id) {
    SandboxState current = SandboxState::failed;
    const bool known = store_.mutate(id, [&](SandboxDoc& d) {
        current = d.state;
        if (is_frozen(d.state)) {
            d.state = SandboxState::running;
            d.state_since = d.last_activity = unix_now();
        }
    });
    if (!known) {
        throw sandbox_not_found();
    }
    if (!is_frozen(current)) {
        throw Refusal{409, "InvalidSandboxState",
                      fmt::format("Sandbox must be in Stopped state to resume. Current "
                                  "state: {}",
                                  wire_name(current))};
    }
    auto answer = require(id);
    co_await offload_freeze(id);
    co_return answer;
}

json::object SandboxService::set_policy(const std::string& id, const json::object& policy,
                                        bool lifecycle) {
    bool live = true;
    const bool known = store_.mutate(id, [&](SandboxDoc& d) {
        if (d.state == SandboxState::deleting || d.state == SandboxState::failed) {
            live = false;
            return;
        }
        if (lifecycle) {
            d.lifecycle = policy;  // POST replaces the whole policy
        } else {
            d.egress_policy = policy;
        }
    });
    if (!known) {
        throw sandbox_not_found();
    }
    if (!live) {
        throw sandbox_not_running(id);
    }
    return policy;
}

json::object SandboxService::set_lifecycle(const std::string& id, const json::object& policy) {
    return set_policy(id, policy, true);
}

json::object SandboxService::set_egress_policy(const std::string& id, const json::object& policy) {
    checked_egress(policy);  // validated; a running sandbox keeps its enforced policy
    return set_policy(id, policy, false);
}

std::map<SandboxState, int> SandboxService::count_by_state() const {
    std::map<SandboxState, int> counts;
    for (const auto state : kSandboxStates) {
        counts[state] = 0;
    }
    for (const auto& doc : store_.sandboxes()) {
        ++counts[doc.state];
    }
    return counts;
}

}  // namespace maf_sandbox::emulator
