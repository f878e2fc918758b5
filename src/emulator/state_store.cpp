// The emulator's persistent state, one concern: the records (sandboxes, labels, policies, disk
// images) in one JSON document under <state-dir>/emulator/state.json, loaded through the trusted
// state directory and rewritten crash-safely (strictly or eventually) on every change.
#include "state_store.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>

#include <fmt/format.h>
#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <utility>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/net/tls.hpp"
#include "maf_sandbox/runtime/kernel/state_dir.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
namespace {

std::string str(const json::object& o, const char* key) {
    if (auto* v = o.if_contains(key); v != nullptr && v->is_string()) {
        return std::string(v->as_string());
    }
    return {};
}

double num(const json::object& o, const char* key) {
    if (auto* v = o.if_contains(key); v != nullptr && v->is_number()) {
        return v->to_number<double>();
    }
    return 0;
}

json::object obj(const json::object& o, const char* key) {
    if (auto* v = o.if_contains(key); v != nullptr && v->is_object()) {
        return v->as_object();
    }
    return {};
}

json::object labels_json(const std::map<std::string, std::string>& labels) {
    json::object out;
    for (const auto& [k, v] : labels) {
        out[k] = v;
    }
    return out;
}

std::map<std::string, std::string> labels_of(const json::object& o) {
    std::map<std::string, std::string> out;
    for (const auto& [k, v] : o) {
        if (v.is_string()) {
            out[std::string(k)] = std::string(v.as_string());
        }
    }
    return out;
}

json::object sandbox_to_state(const SandboxDoc& d) {
    return json::object{{"id", d.id},
                        {"group", d.group},
                        {"labels", labels_json(d.labels)},
                        {"state", wire_name(d.state)},
                        {"stoppedReason", d.stopped_reason},
                        {"stoppedAt", d.stopped_at},
                        {"createdAt", d.created_at},
                        {"sourcesRef", d.sources_ref},
                        {"resources", d.resources},
                        {"egressPolicy", d.egress_policy},
                        {"lifecycle", d.lifecycle},
                        {"environment", d.environment},
                        {"image", d.image},
                        {"failure", d.failure},
                        {"handle", d.handle},
                        {"lastActivity", d.last_activity},
                        {"stateSince", d.state_since}};
}

SandboxDoc sandbox_from_state(const json::object& o) {
    SandboxDoc d;
    d.id = str(o, "id");
    d.group = str(o, "group");
    d.labels = labels_of(obj(o, "labels"));
    // A spelling no emulator wrote (a hand-edited file) reads as a sandbox that failed.
    d.state = sandbox_state_from_wire(str(o, "state")).value_or(SandboxState::failed);
    d.stopped_reason = str(o, "stoppedReason");
    d.stopped_at = str(o, "stoppedAt");
    d.created_at = str(o, "createdAt");
    d.sources_ref = obj(o, "sourcesRef");
    d.resources = obj(o, "resources");
    d.egress_policy = obj(o, "egressPolicy");
    d.lifecycle = obj(o, "lifecycle");
    d.environment = obj(o, "environment");
    d.image = str(o, "image");
    d.failure = str(o, "failure");
    d.handle = obj(o, "handle");
    d.last_activity = num(o, "lastActivity");
    d.state_since = num(o, "stateSince");
    return d;
}

json::object image_to_state(const DiskImageDoc& d) {
    return json::object{{"id", d.id},
                        {"group", d.group},
                        {"name", d.name},
                        {"labels", labels_json(d.labels)},
                        {"base", d.base},
                        {"state", wire_name(d.state)},
                        {"message", d.message},
                        {"createdAt", d.created_at},
                        {"localImage", d.local_image}};
}

DiskImageDoc image_from_state(const json::object& o) {
    DiskImageDoc d;
    d.id = str(o, "id");
    d.group = str(o, "group");
    d.name = str(o, "name");
    d.labels = labels_of(obj(o, "labels"));
    d.base = str(o, "base");
    // A spelling no emulator wrote (a hand-edited file) reads as an import that failed.
    d.state = disk_image_state_from_wire(str(o, "state")).value_or(DiskImageState::failed);
    d.message = str(o, "message");
    d.created_at = str(o, "createdAt");
    d.local_image = str(o, "localImage");
    return d;
}

}  // namespace

StateNotPersisted::StateNotPersisted(int error_number, std::string detail)
    : std::runtime_error(error_number == ENOSPC || error_number == EDQUOT
                             ? "The emulator's state disk is full, so the change was not made; "
                               "retry once its operator has freed space."
                             : "The emulator could not save its state, so the change was not "
                               "made; retry, and see the emulator's log if it persists."),
      error_number_(error_number),
      detail_(std::move(detail)) {}

bool StateNotPersisted::no_space() const noexcept {
    return error_number_ == ENOSPC || error_number_ == EDQUOT;
}

bool in_group(const std::string& doc_group, const std::string& group) {
    return doc_group.empty() || doc_group == group;
}

double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string iso_time(double unix_seconds) {
    const auto whole = static_cast<std::time_t>(std::floor(unix_seconds));
    const auto micros = static_cast<long>((unix_seconds - static_cast<double>(whole)) * 1e6);
    std::tm tm{};
    ::gmtime_r(&whole, &tm);
    char buffer[64];
    std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &tm);
    return fmt::format("{}.{:06d}+00:00", buffer, micros);
}

std::string new_guid() {
    return random_uuid4();
}

json::object SandboxDoc::to_wire(const std::string& region) const {
    json::object out{{"id", id},
                     {"sandboxGroupId", group},
                     {"labels", labels_json(labels)},
                     {"vmmType", "maf-emulator"},
                     {"sourcesRef", sources_ref},
                     {"resources", resources},
                     {"createdAt", created_at},
                     {"state", wire_name(state)},
                     {"ports", json::array{}},
                     {"egressPolicy", egress_policy},
                     {"lifecycle", lifecycle},
                     {"region", region}};
    if (!stopped_reason.empty()) {
        out["stateDetails"] =
            json::object{{"stoppedReason", stopped_reason}, {"stoppedAt", stopped_at}};
    }
    if (!environment.empty()) {
        out["environment"] = environment;
    }
    return out;
}

json::object DiskImageDoc::to_wire() const {
    json::object status{{"state", wire_name(state)}, {"createdAt", created_at}};
    if (!message.empty()) {
        status["message"] = message;
    }
    return json::object{{"id", id},
                        {"name", name},
                        {"labels", labels_json(labels)},
                        {"image", json::object{{"base", base}}},
                        {"status", status}};
}

namespace {

// The records name processes, cgroups and directories the emulator acts on as root: a state
// directory another user controls is refused, and every file in it is opened through the checked
// descriptor, never through a link.
runtime::UniqueFd open_emulator_dir(const std::filesystem::path& state_dir) {
    (void)runtime::open_trusted_state_dir(state_dir, 0700, kEmulatorStateAdvice);
    return runtime::open_trusted_state_dir(state_dir / "emulator", 0700, kEmulatorStateAdvice);
}

}  // namespace

StateStore::StateStore(std::filesystem::path state_dir)
    : file_(state_dir / "emulator" / "state.json"),
      dir_(open_emulator_dir(state_dir)),
      stage_key_(staging::StageKey::load(dir_.get(), file_.parent_path())) {
    const runtime::UniqueFd in{
        ::openat(dir_.get(), file_.filename().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)};
    if (!in) {
        if (errno == ENOENT) {
            return;
        }
        throw SystemError(errno, fmt::format("opening the emulator state {}", file_.string()),
                          "it must be a regular file (not a link) owned by the emulator's user");
    }
    std::string text;
    char chunk[65536];
    for (;;) {
        const ssize_t got = ::read(in.get(), chunk, sizeof chunk);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            throw SystemError(errno, fmt::format("reading the emulator state {}", file_.string()));
        }
        if (got == 0) {
            break;
        }
        text.append(chunk, static_cast<std::size_t>(got));
    }
    boost::system::error_code ec;
    auto value = json::parse(text, ec);
    if (ec || !value.is_object()) {
        throw Error(
            fmt::format("the emulator state {} is not valid JSON; restore it from a backup "
                        "or remove it to start empty",
                        file_.string()));
    }
    for (const auto& item : obj(value.as_object(), "sandboxes")) {
        if (item.value().is_object()) {
            auto doc = sandbox_from_state(item.value().as_object());
            sandboxes_[doc.id] = doc;
        }
    }
    for (const auto& item : obj(value.as_object(), "diskImages")) {
        if (item.value().is_object()) {
            auto doc = image_from_state(item.value().as_object());
            disk_images_[doc.id] = doc;
        }
    }
}

void StateStore::check_record(std::size_t bytes, const char* what) const {
    if (bytes > kMaxStateRecordBytes) {
        throw StateRecordTooLarge(fmt::format(
            "the {} record would take {} bytes of the emulator's state, over the cap of {} bytes; "
            "send fewer or shorter labels, environment variables or policy rules",
            what, bytes, kMaxStateRecordBytes));
    }
}

void StateStore::check_count(bool adds) const {
    if (adds && sandboxes_.size() + disk_images_.size() >= kMaxStateRecords) {
        throw StateRecordTooLarge(fmt::format(
            "the emulator already keeps {} sandboxes and disk images, its cap; delete some first",
            kMaxStateRecords));
    }
}

void StateStore::save_locked() const {
    json::object sandboxes;
    for (const auto& [id, doc] : sandboxes_) {
        sandboxes[id] = sandbox_to_state(doc);
    }
    json::object images;
    for (const auto& [id, doc] : disk_images_) {
        images[id] = image_to_state(doc);
    }
    const json::object root{{"version", 1}, {"sandboxes", sandboxes}, {"diskImages", images}};
    try {
        net::write_file_atomically(file_, json::serialize(root), 0600);
    } catch (const SystemError& e) {
        throw StateNotPersisted(e.error_number(), e.what());
    }
    pending_ = false;
}

void StateStore::save_eventually_locked() const {
    try {
        save_locked();
    } catch (const StateNotPersisted&) {
        // The next flush() or strict write persists this change.
        pending_ = true;
    }
}

namespace {

// Runs `change` on the maps, then saves; on a failed save puts back `undo` and rethrows, so a
// strict write leaves memory as the disk has it (plus only what was already pending).
template <typename Change, typename Undo>
void strictly(const Change& change, const Undo& undo, const std::function<void()>& save) {
    change();
    try {
        save();
    } catch (const StateNotPersisted&) {
        undo();
        throw;
    }
}

// Records `doc` under its id in `records`, strictly: a failed save puts back what was there
// before (or nothing), so memory never holds a record the disk refused.
template <class Records, class Doc>
void put_strictly(Records& records, const Doc& doc, const std::function<void()>& save) {
    std::optional<Doc> before;
    if (auto it = records.find(doc.id); it != records.end()) {
        before = it->second;
    }
    strictly([&] { records[doc.id] = doc; },
             [&] {
                 if (before) {
                     records[doc.id] = *before;
                 } else {
                     records.erase(doc.id);
                 }
             },
             save);
}

}  // namespace

std::optional<SandboxDoc> StateStore::sandbox(const std::string& id) const {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) {
        return std::nullopt;
    }
    return it->second;
}

std::vector<SandboxDoc> StateStore::sandboxes() const {
    std::lock_guard lock(mutex_);
    std::vector<SandboxDoc> out;
    for (const auto& [id, doc] : sandboxes_) {
        out.push_back(doc);
    }
    std::sort(out.begin(), out.end(), [](const SandboxDoc& a, const SandboxDoc& b) {
        return std::tie(a.created_at, a.id) < std::tie(b.created_at, b.id);
    });
    return out;
}

bool StateStore::change_sandbox(const std::string& id,
                                const std::function<void(SandboxDoc&)>& change, Save save) {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) {
        return false;
    }
    SandboxDoc changed = it->second;
    change(changed);
    check_record(json::serialize(sandbox_to_state(changed)).size(), "sandbox");
    SandboxDoc before = std::exchange(it->second, std::move(changed));
    if (save == Save::strictly) {
        strictly([] {}, [&] { it->second = std::move(before); }, [this] { save_locked(); });
    } else {
        save_eventually_locked();
    }
    return true;
}

bool StateStore::mutate(const std::string& id, const std::function<void(SandboxDoc&)>& change) {
    return change_sandbox(id, change, Save::strictly);
}

bool StateStore::record(const std::string& id, const std::function<void(SandboxDoc&)>& change) {
    return change_sandbox(id, change, Save::eventually);
}

void StateStore::forget(const std::string& id) {
    std::lock_guard lock(mutex_);
    if (sandboxes_.erase(id) != 0) {
        save_eventually_locked();
    }
}

bool StateStore::flush(std::string* failure) {
    std::lock_guard lock(mutex_);
    if (!pending_) {
        return true;
    }
    try {
        save_locked();
        return true;
    } catch (const StateNotPersisted& e) {
        if (failure != nullptr) {
            *failure = e.detail();
        }
        return false;
    }
}

bool StateStore::pending() const {
    std::lock_guard lock(mutex_);
    return pending_;
}

bool StateStore::mutate_volatile(const std::string& id,
                                 const std::function<void(SandboxDoc&)>& change) {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) {
        return false;
    }
    change(it->second);
    return true;
}

void StateStore::put(const SandboxDoc& doc) {
    std::lock_guard lock(mutex_);
    check_record(json::serialize(sandbox_to_state(doc)).size(), "sandbox");
    check_count(sandboxes_.count(doc.id) == 0);
    put_strictly(sandboxes_, doc, [this] { save_locked(); });
}

void StateStore::put_new(SandboxDoc& doc) {
    std::lock_guard lock(mutex_);
    const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const std::int64_t stamp = std::max<std::int64_t>(now_us, last_created_us_ + 1);
    const auto whole = static_cast<std::time_t>(stamp / 1'000'000);
    std::tm tm{};
    ::gmtime_r(&whole, &tm);
    char buffer[64];
    std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &tm);
    doc.created_at = fmt::format("{}.{:06d}+00:00", buffer, stamp % 1'000'000);
    check_record(json::serialize(sandbox_to_state(doc)).size(), "sandbox");
    check_count(sandboxes_.count(doc.id) == 0);
    // A client's create: strict, so a disk that cannot record it leaves nothing listed.
    put_strictly(sandboxes_, doc, [this] { save_locked(); });
    last_created_us_ = stamp;
}

void StateStore::erase(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) {
        return;
    }
    SandboxDoc before = it->second;
    strictly([&] { sandboxes_.erase(id); }, [&] { sandboxes_[id] = std::move(before); },
             [this] { save_locked(); });
}

std::optional<DiskImageDoc> StateStore::disk_image(const std::string& id) const {
    std::lock_guard lock(mutex_);
    auto it = disk_images_.find(id);
    if (it == disk_images_.end()) {
        return std::nullopt;
    }
    return it->second;
}

std::vector<DiskImageDoc> StateStore::disk_images() const {
    std::lock_guard lock(mutex_);
    std::vector<DiskImageDoc> out;
    for (const auto& [id, doc] : disk_images_) {
        out.push_back(doc);
    }
    return out;
}

void StateStore::put(const DiskImageDoc& doc) {
    std::lock_guard lock(mutex_);
    check_record(json::serialize(image_to_state(doc)).size(), "disk image");
    check_count(disk_images_.count(doc.id) == 0);
    put_strictly(disk_images_, doc, [this] { save_locked(); });
}

bool StateStore::record(const DiskImageDoc& doc) {
    std::lock_guard lock(mutex_);
    auto it = disk_images_.find(doc.id);
    if (it == disk_images_.end()) {
        return false;
    }
    check_record(json::serialize(image_to_state(doc)).size(), "disk image");
    it->second = doc;
    save_eventually_locked();
    return true;
}

void StateStore::erase_disk_image(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto it = disk_images_.find(id);
    if (it == disk_images_.end()) {
        return;
    }
    DiskImageDoc before = it->second;
    strictly([&] { disk_images_.erase(id); }, [&] { disk_images_[id] = std::move(before); },
             [this] { save_locked(); });
}

}  // namespace maf_sandbox::emulator
