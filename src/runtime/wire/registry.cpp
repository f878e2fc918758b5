// One concern, the registry: the sandbox records on disk (one JSON file per sandbox), their label
// selectors and the per-key locks, read and written by the host and by the supervisor's owner
// watch.
#include "maf_sandbox/runtime/wire/registry.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

#include "../kernel/fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/rootless.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr int kRecordVersion = 1;
constexpr const char* kRecordFile = "record.json";
constexpr std::size_t kMaxRecordBytes = 1 << 20;
constexpr std::size_t kMaxLabelPart = 63;

struct StateName {
    SandboxState state;
    std::string_view name;
};
constexpr std::array<StateName, 3> kStates{{{SandboxState::creating, "creating"},
                                            {SandboxState::running, "running"},
                                            {SandboxState::stopping, "stopping"}}};

std::int64_t to_ms(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

Clock::time_point from_ms(std::int64_t ms) {
    return Clock::time_point{
        std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds{ms})};
}

const json::value& field(const json::object& object, std::string_view name) {
    const auto* found = object.if_contains(name);
    if (found == nullptr) {
        throw InvalidArgument(
            fmt::format("sandbox record has no '{}' field; the record is "
                        "damaged, run `maf-sandbox gc`",
                        name));
    }
    return *found;
}

std::string string_field(const json::object& object, std::string_view name) {
    const auto& value = field(object, name);
    if (!value.is_string()) {
        throw InvalidArgument(fmt::format("sandbox record field '{}' is not a string", name));
    }
    return std::string(value.get_string());
}

template <typename T>
T number_field(const json::object& object, std::string_view name) {
    const auto* value = object.if_contains(name);
    if (value == nullptr || value->is_null()) {
        return T{};
    }
    try {
        return value->to_number<T>();
    } catch (const std::exception&) {
        throw InvalidArgument(fmt::format("sandbox record field '{}' is not a number", name));
    }
}

bool valid_label_char(char c, bool allow_slash) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || (allow_slash && c == '/');
}

void check_requirement(std::string_view key, std::string_view value, std::string_view item) {
    if (key.empty()) {
        throw InvalidArgument(
            fmt::format("label selector item '{}' has an empty key; write k=v", item));
    }
    if (key.size() > kMaxLabelPart ||
        !std::all_of(key.begin(), key.end(), [](char c) { return valid_label_char(c, true); })) {
        throw InvalidArgument(fmt::format(
            "label selector key '{}' is not valid; keys are 1 to 63 characters of A-Z a-z 0-9 . _ "
            "- /",
            key));
    }
    if (value.size() > kMaxLabelPart || !std::all_of(value.begin(), value.end(), [](char c) {
            return valid_label_char(c, false);
        })) {
        throw InvalidArgument(fmt::format(
            "label selector value '{}' (for key '{}') is not valid; values are at most 63 "
            "characters of A-Z a-z 0-9 . _ -",
            value, key));
    }
}

void add_requirement(std::map<std::string, std::string>& required, std::string_view raw) {
    auto item = raw;
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) {
        item.remove_prefix(1);
    }
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) {
        item.remove_suffix(1);
    }
    if (item.empty()) {
        throw InvalidArgument("label selector has an empty item; write k=v[,k2=v2]");
    }
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) {
        throw InvalidArgument(fmt::format(
            "label selector item '{}' has no '='; write k=v (only equality is supported)", item));
    }
    const auto key = item.substr(0, eq);
    const auto value = item.substr(eq + 1);
    if (key.ends_with('!')) {
        throw InvalidArgument(fmt::format(
            "label selector item '{}' uses '!='; only equality (k=v) is supported", item));
    }
    check_requirement(key, value, item);
    const auto [it, inserted] = required.emplace(std::string(key), std::string(value));
    if (!inserted && it->second != value) {
        throw InvalidArgument(fmt::format(
            "label selector names key '{}' twice with different values ('{}' and '{}'); it could "
            "never match",
            key, it->second, value));
    }
}

std::uint64_t fnv1a(std::string_view text) {
    std::uint64_t hash = 14695981039346656037ull;
    for (const unsigned char c : text) {
        hash ^= c;
        hash *= 1099511628211ull;
    }
    return hash;
}

// Mount points at or under `dir`, deepest first, from /proc/self/mountinfo.
std::vector<std::string> mounts_under(const fs::path& dir) {
    std::vector<std::string> found;
    std::ifstream info("/proc/self/mountinfo");
    const std::string prefix = dir.string();
    std::string line;
    while (std::getline(info, line)) {
        std::istringstream fields(line);
        std::string id, parent, devno, root, mount_point;
        fields >> id >> parent >> devno >> root >> mount_point;
        std::string decoded;  // mountinfo escapes space, tab, newline and backslash as \ooo
        for (std::size_t i = 0; i < mount_point.size(); ++i) {
            if (mount_point[i] == '\\' && i + 3 < mount_point.size()) {
                decoded += static_cast<char>(std::stoi(mount_point.substr(i + 1, 3), nullptr, 8));
                i += 3;
            } else {
                decoded += mount_point[i];
            }
        }
        if (decoded == prefix || decoded.starts_with(prefix + "/")) {
            found.push_back(decoded);
        }
    }
    std::sort(found.begin(), found.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    return found;
}

}  // namespace

fs::path default_state_dir() {
    if (const char* env = std::getenv(kStateDirEnv); env != nullptr && *env != '\0') {
        return fs::path(env);
    }
    return running_rootless() ? rootless_state_dir() : fs::path(kDefaultStateDir);
}

std::string_view to_string(SandboxState state) {
    for (const auto& entry : kStates) {
        if (entry.state == state) {
            return entry.name;
        }
    }
    return "unknown";
}

SandboxState parse_sandbox_state(std::string_view text) {
    for (const auto& entry : kStates) {
        if (entry.name == text) {
            return entry.state;
        }
    }
    throw InvalidArgument(
        fmt::format("unknown sandbox state '{}'; expected creating, running or stopping", text));
}

std::optional<std::uint64_t> process_start_time(pid_t pid) {
    if (pid <= 0) {
        return std::nullopt;
    }
    std::string stat;
    try {
        stat = detail::read_host_file(fmt::format("/proc/{}/stat", pid), 4096);
    } catch (const Error&) {
        return std::nullopt;
    }
    // The command name may hold spaces and parentheses: fields resume after the last ')'.
    const auto close = stat.rfind(')');
    if (close == std::string::npos) {
        return std::nullopt;
    }
    std::istringstream rest(stat.substr(close + 1));
    std::string token;
    // Field 3 is the state; field 22 the start time.
    for (int field_number = 3; rest >> token; ++field_number) {
        if (field_number == 3 && (token == "Z" || token == "X")) {
            return std::nullopt;  // a zombie is not a live supervisor
        }
        if (field_number == 22) {
            return std::strtoull(token.c_str(), nullptr, 10);
        }
    }
    return std::nullopt;
}

json::value to_json(const SandboxRecord& record) {
    json::object labels;
    for (const auto& [key, value] : record.labels) {
        labels[key] = value;
    }
    json::array allow;
    for (const auto& host : record.egress_allow) {
        allow.emplace_back(host);
    }
    json::object lifecycle;
    if (record.lifecycle.idle_timeout) {
        lifecycle["idle_timeout_s"] = record.lifecycle.idle_timeout->count();
    }
    if (record.lifecycle.max_lifetime) {
        lifecycle["max_lifetime_s"] = record.lifecycle.max_lifetime->count();
    }
    json::value host_ids = nullptr;
    if (record.host_ids) {
        host_ids = json::object{{"base", record.host_ids->base},
                                {"count", record.host_ids->count},
                                {"claims_dir", record.host_ids->claims_dir.string()}};
    }
    return json::object{
        {"version", kRecordVersion},
        {"host_ids", std::move(host_ids)},
        {"id", record.id},
        {"labels", std::move(labels)},
        {"image", record.image},
        {"egress", std::string(to_string(record.egress))},
        {"egress_allow", std::move(allow)},
        {"limits", json::object{{"memory_bytes", record.limits.memory_bytes},
                                {"pids", record.limits.pids},
                                {"cpus", record.limits.cpus},
                                {"disk_bytes", record.limits.disk_bytes}}},
        {"runtime", record.runtime},
        {"supervisor", json::object{{"pid", record.supervisor.pid},
                                    {"start_time", record.supervisor.start_time}}},
        {"created_at_ms", to_ms(record.created_at)},
        {"last_used_at_ms", to_ms(record.last_used_at)},
        {"lifecycle", std::move(lifecycle)},
        {"state", std::string(to_string(record.state))},
    };
}

SandboxRecord record_from_json(const json::value& value) {
    if (!value.is_object()) {
        throw InvalidArgument("a sandbox record is not a JSON object; the record is damaged");
    }
    const auto& object = value.get_object();
    SandboxRecord record;
    record.id = string_field(object, "id");
    Registry::validate_id(record.id);
    const auto& labels = field(object, "labels");
    if (!labels.is_object()) {
        throw InvalidArgument("sandbox record field 'labels' is not an object");
    }
    for (const auto& [key, label] : labels.get_object()) {
        if (!label.is_string()) {
            throw InvalidArgument(
                fmt::format("sandbox record label '{}' is not a string", std::string_view(key)));
        }
        record.labels.emplace(std::string(key), std::string(label.get_string()));
    }
    record.image = string_field(object, "image");
    record.egress = parse_egress(string_field(object, "egress"));
    if (const auto* allow = object.if_contains("egress_allow"); allow && allow->is_array()) {
        for (const auto& host : allow->get_array()) {
            if (host.is_string()) {
                record.egress_allow.emplace_back(host.get_string());
            }
        }
    }
    if (const auto* limits = object.if_contains("limits"); limits && limits->is_object()) {
        const auto& l = limits->get_object();
        record.limits.memory_bytes = number_field<std::uint64_t>(l, "memory_bytes");
        record.limits.pids = number_field<std::uint64_t>(l, "pids");
        record.limits.cpus = number_field<double>(l, "cpus");
        record.limits.disk_bytes = number_field<std::uint64_t>(l, "disk_bytes");
    }
    if (const auto* runtime = object.if_contains("runtime"); runtime && runtime->is_object()) {
        record.runtime = runtime->get_object();
    }
    if (const auto* supervisor = object.if_contains("supervisor");
        supervisor && supervisor->is_object()) {
        record.supervisor.pid = number_field<pid_t>(supervisor->get_object(), "pid");
        record.supervisor.start_time =
            number_field<std::uint64_t>(supervisor->get_object(), "start_time");
    }
    if (const auto* ids = object.if_contains("host_ids"); ids && ids->is_object()) {
        const auto& i = ids->get_object();
        record.host_ids = SandboxRecord::HostIds{number_field<uid_t>(i, "base"),
                                                 number_field<std::uint32_t>(i, "count"),
                                                 string_field(i, "claims_dir")};
    }
    record.created_at = from_ms(number_field<std::int64_t>(object, "created_at_ms"));
    record.last_used_at = from_ms(number_field<std::int64_t>(object, "last_used_at_ms"));
    if (const auto* lifecycle = object.if_contains("lifecycle");
        lifecycle && lifecycle->is_object()) {
        const auto& l = lifecycle->get_object();
        if (l.contains("idle_timeout_s")) {
            record.lifecycle.idle_timeout =
                std::chrono::seconds{number_field<std::int64_t>(l, "idle_timeout_s")};
        }
        if (l.contains("max_lifetime_s")) {
            record.lifecycle.max_lifetime =
                std::chrono::seconds{number_field<std::int64_t>(l, "max_lifetime_s")};
        }
    }
    record.state = parse_sandbox_state(string_field(object, "state"));
    return record;
}

bool lifecycle_expired(const SandboxRecord& record, Clock::time_point now) {
    if (record.lifecycle.max_lifetime &&
        now >= record.created_at + *record.lifecycle.max_lifetime) {
        return true;
    }
    const auto last = std::max(record.last_used_at, record.created_at);
    return record.lifecycle.idle_timeout && now >= last + *record.lifecycle.idle_timeout;
}

LabelSelector::LabelSelector(std::map<std::string, std::string> requirements)
    : required_(std::move(requirements)) {
    for (const auto& [key, value] : required_) {
        check_requirement(key, value, key + "=" + value);
    }
}

LabelSelector LabelSelector::parse(std::string_view text) {
    if (text.find_first_not_of(" \t") == std::string_view::npos) {
        throw InvalidArgument(
            "the label selector is empty, which would select every sandbox; give at least one k=v");
    }
    std::map<std::string, std::string> required;
    std::size_t start = 0;
    for (;;) {
        const auto comma = text.find(',', start);
        add_requirement(required,
                        text.substr(start, comma == std::string_view::npos ? std::string_view::npos
                                                                           : comma - start));
        if (comma == std::string_view::npos) {
            break;
        }
        start = comma + 1;
    }
    LabelSelector selector;
    selector.required_ = std::move(required);
    return selector;
}

LabelSelector LabelSelector::parse(const std::vector<std::string>& items) {
    if (items.empty()) {
        throw InvalidArgument(
            "the label selector is empty, which would select every sandbox; give at least one k=v");
    }
    std::map<std::string, std::string> required;
    for (const auto& item : items) {
        add_requirement(required, item);
    }
    LabelSelector selector;
    selector.required_ = std::move(required);
    return selector;
}

bool LabelSelector::matches(const std::map<std::string, std::string>& labels) const {
    return std::all_of(required_.begin(), required_.end(), [&](const auto& requirement) {
        const auto found = labels.find(requirement.first);
        return found != labels.end() && found->second == requirement.second;
    });
}

Registry::Registry(fs::path state_dir) : state_dir_(std::move(state_dir)) {
    if (state_dir_.empty()) {
        throw InvalidArgument(
            "the state directory is empty; set MAF_SANDBOX_STATE_DIR or the "
            "runtime's state_dir");
    }
    state_dir_ = fs::absolute(state_dir_).lexically_normal();
    // 0700: nothing here is for any host user but root. A sandbox's supervisor, once it is its
    // own host uid, reaches its root through the working directory it was started in, and every
    // client of exec.sock is root. A state directory another user controls is refused here: its
    // records are acted on as root.
    detail::make_state_dir(state_dir_, 0700);
    detail::make_state_dir(state_dir_ / "sandboxes", 0700);
    detail::make_state_dir(state_dir_ / "locks", 0700);
}

std::string Registry::new_id() {
    return detail::random_hex(16);
}

bool Registry::is_id(std::string_view id) noexcept {
    const bool hex = std::all_of(id.begin(), id.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    });
    return hex && id.size() >= 16 && id.size() <= 64;
}

void Registry::validate_id(std::string_view id) {
    if (!is_id(id)) {
        throw InvalidArgument(fmt::format(
            "'{}' is not a sandbox id (16 to 64 lowercase hex digits); list ids with `maf-sandbox "
            "ls`",
            id));
    }
}

fs::path Registry::sandbox_dir(std::string_view id) const {
    validate_id(id);
    return state_dir_ / "sandboxes" / std::string(id);
}

fs::path Registry::record_path(std::string_view id) const {
    return sandbox_dir(id) / kRecordFile;
}

void Registry::write_record(const SandboxRecord& record) const {
    // (perf) Atomic, not fsync'd: a record only describes kernel objects (processes, cgroups,
    // mounts) that an operating-system crash ends anyway, and gc reaps a record or directory left
    // behind either way; the rename alone keeps a process crash from tearing it. The two fsyncs
    // cost several milliseconds of every create and acquire on this machine.
    detail::write_file_durably(record_path(record.id), json::serialize(to_json(record)), 0600,
                               /*sync=*/false);
}

void Registry::create(const SandboxRecord& record) {
    const auto dir = sandbox_dir(record.id);
    if (::mkdir(dir.c_str(), 0700) != 0) {
        if (errno == EEXIST) {
            throw InvalidArgument(fmt::format("a sandbox with id {} already exists", record.id));
        }
        throw SystemError(errno, fmt::format("creating sandbox directory '{}'", dir.string()),
                          "check permissions on the state directory");
    }
    try {
        write_record(record);
    } catch (...) {
        detail::remove_host_tree(dir, true);
        throw;
    }
}

std::optional<SandboxRecord> Registry::get(std::string_view id) const {
    const auto path = record_path(id);
    try {
        return record_from_json(json::parse(detail::read_host_file(path, kMaxRecordBytes)));
    } catch (const SystemError& e) {
        if (e.error_number() == ENOENT || e.error_number() == ENOTDIR) {
            return std::nullopt;
        }
        throw;
    } catch (const InvalidArgument&) {
        return std::nullopt;  // damaged: gc reaps it as an orphan directory
    } catch (const std::exception&) {
        return std::nullopt;  // JSON syntax error: a torn write cannot happen, damage can
    }
}

void Registry::update(const SandboxRecord& record) {
    struct stat st {};
    if (::stat(record_path(record.id).c_str(), &st) != 0) {
        throw InvalidArgument(fmt::format(
            "sandbox {} is not in the registry (it was removed); acquire a new one", record.id));
    }
    write_record(record);
}

void Registry::remove(std::string_view id) {
    const auto dir = sandbox_dir(id);
    // The record goes first: a crash after this leaves an orphan directory gc removes, never a
    // record pointing at a half-deleted sandbox.
    if (::unlink(record_path(id).c_str()) != 0 && errno != ENOENT && errno != ENOTDIR) {
        throw SystemError(errno, fmt::format("removing the record of sandbox {}", id));
    }
    for (const auto& mount_point : mounts_under(dir)) {
        ::umount2(mount_point.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
    }
    detail::remove_host_tree(dir, true);
}

std::vector<SandboxRecord> Registry::list() const {
    return list(LabelSelector{});
}

std::vector<SandboxRecord> Registry::list(const LabelSelector& selector) const {
    std::vector<SandboxRecord> records;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(state_dir_ / "sandboxes", error)) {
        // Not an exception per stray entry: this runs on every warm exec.
        const auto name = entry.path().filename().string();
        if (!is_id(name)) {
            continue;
        }
        if (auto record = get(name); record && selector.matches(record->labels)) {
            records.push_back(std::move(*record));
        }
    }
    if (error) {
        throw SystemError(error.value(),
                          fmt::format("listing '{}'", (state_dir_ / "sandboxes").string()));
    }
    std::sort(records.begin(), records.end(), [](const SandboxRecord& a, const SandboxRecord& b) {
        return std::tie(a.created_at, a.id) < std::tie(b.created_at, b.id);
    });
    return records;
}

bool Registry::is_alive(const SandboxRecord& record) {
    if (record.supervisor.pid <= 0) {
        return false;
    }
    const auto started = process_start_time(record.supervisor.pid);
    return started && *started == record.supervisor.start_time;
}

namespace {
fs::path lock_path(const fs::path& state_dir, std::string_view key) {
    return state_dir / "locks" / fmt::format("{:016x}.lock", fnv1a(key));
}

UniqueFd open_lock_file(const fs::path& path) {
    UniqueFd fd{::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)};
    if (!fd) {
        throw SystemError(errno, fmt::format("opening lock file '{}'", path.string()),
                          "check permissions on the state directory");
    }
    return fd;
}

// True when `path` still names the inode `fd` locked: a releaser removes the file while it
// holds the lock, so a taker that waited on the removed inode must open the path again.
bool still_named(int fd, const fs::path& path) {
    struct stat held {};
    struct stat named {};
    return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
           held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

KeyLock take_lock(const fs::path& state_dir, std::string_view key, bool wait) {
    const auto path = lock_path(state_dir, key);
    for (;;) {
        auto fd = open_lock_file(path);
        if (::flock(fd.get(), wait ? LOCK_EX : LOCK_EX | LOCK_NB) != 0) {
            if (errno == EINTR) {
                continue;
            }
            if (!wait && errno == EWOULDBLOCK) {
                return KeyLock{};
            }
            throw SystemError(errno, "taking a registry lock");
        }
        if (still_named(fd.get(), path)) {
            return KeyLock{std::move(fd), path};
        }
    }
}
}  // namespace

void KeyLock::release() noexcept {
    if (fd_.valid()) {
        ::unlink(path_.c_str());  // while still holding the flock
        fd_.reset();
    }
}

KeyLock Registry::lock(std::string_view key) const {
    return take_lock(state_dir_, key, true);
}

KeyLock Registry::try_lock(std::string_view key) const {
    return take_lock(state_dir_, key, false);
}

}  // namespace maf_sandbox::runtime
