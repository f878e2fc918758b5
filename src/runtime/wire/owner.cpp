#include "maf_sandbox/runtime/wire/owner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"

namespace maf_sandbox::runtime {

namespace json = boost::json;

namespace {
constexpr const char* kOwnerKey = "owner";
constexpr const char* kOwnersKey = "owners";

void store_owners(SandboxRecord& record, const std::vector<SandboxOwner>& owners) {
    if (owners.empty()) {
        record.runtime.erase(kOwnerKey);
        record.runtime.erase(kOwnersKey);
        return;
    }
    json::array list;
    for (const auto& owner : owners) {
        list.emplace_back(to_json(owner));
    }
    record.runtime[kOwnerKey] = to_json(owners.front());
    record.runtime[kOwnersKey] = std::move(list);
}

std::vector<SandboxOwner> live_only(std::vector<SandboxOwner> owners) {
    std::erase_if(owners, [](const SandboxOwner& owner) { return !owner_alive(owner); });
    return owners;
}
}  // namespace

SandboxOwner current_process_as_owner() {
    const pid_t pid = ::getpid();
    const auto start = process_start_time(pid);
    if (!start) {
        throw SystemError(ESRCH, "reading this process's start time from /proc/self/stat",
                          "mount /proc; a one-shot sandbox needs it to name its owner");
    }
    return SandboxOwner{pid, *start};
}

bool owner_alive(const SandboxOwner& owner) {
    const auto start = process_start_time(owner.pid);
    return start && *start == owner.start_time;
}

json::object to_json(const SandboxOwner& owner) {
    return json::object{{"pid", owner.pid}, {"start_time", owner.start_time}};
}

std::optional<SandboxOwner> owner_from_json(const json::value& value) {
    const auto* object = value.if_object();
    if (object == nullptr) {
        return std::nullopt;
    }
    const auto* pid = object->if_contains("pid");
    const auto* start = object->if_contains("start_time");
    if (pid == nullptr || start == nullptr || !(pid->is_int64() || pid->is_uint64()) ||
        !(start->is_int64() || start->is_uint64())) {
        return std::nullopt;
    }
    SandboxOwner owner{pid->to_number<pid_t>(), start->to_number<std::uint64_t>()};
    if (owner.pid <= 0) {
        return std::nullopt;
    }
    return owner;
}

std::optional<SandboxOwner> recorded_owner(const SandboxRecord& record) {
    const auto* owner = record.runtime.if_contains(kOwnerKey);
    return owner != nullptr ? owner_from_json(*owner) : std::nullopt;
}

void set_recorded_owner(SandboxRecord& record, const SandboxOwner& owner) {
    store_owners(record, {owner});
}

std::vector<SandboxOwner> recorded_owners(const SandboxRecord& record) {
    std::vector<SandboxOwner> owners;
    const auto add = [&](const json::value& value) {
        const auto owner = owner_from_json(value);
        if (owner && std::find(owners.begin(), owners.end(), *owner) == owners.end() &&
            owners.size() < kMaxOwners) {
            owners.push_back(*owner);
        }
    };
    if (const auto* first = record.runtime.if_contains(kOwnerKey)) {
        add(*first);
    }
    if (const auto* list = record.runtime.if_contains(kOwnersKey); list && list->is_array()) {
        for (const auto& item : list->get_array()) {
            add(item);
        }
    }
    return owners;
}

bool add_recorded_owner(SandboxRecord& record, const SandboxOwner& owner) {
    auto owners = live_only(recorded_owners(record));
    if (std::find(owners.begin(), owners.end(), owner) == owners.end()) {
        if (owners.size() >= kMaxOwners) {
            return false;
        }
        owners.push_back(owner);
    }
    store_owners(record, owners);
    return true;
}

std::size_t remove_recorded_owner(SandboxRecord& record, const SandboxOwner& owner) {
    auto owners = live_only(recorded_owners(record));
    std::erase(owners, owner);
    store_owners(record, owners);
    return owners.size();
}

bool owner_gone(const SandboxRecord& record) {
    const auto owners = recorded_owners(record);
    return !owners.empty() && live_only(owners).empty();
}

}  // namespace maf_sandbox::runtime
