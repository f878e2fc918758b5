#include "maf_sandbox/runtime/wire/owner.hpp"

#include <unistd.h>

#include <cerrno>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"

namespace maf_sandbox::runtime {

namespace json = boost::json;

namespace {
constexpr const char* kOwnerKey = "owner";
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
    record.runtime[kOwnerKey] = to_json(owner);
}

bool owner_gone(const SandboxRecord& record) {
    const auto owner = recorded_owner(record);
    return owner && !owner_alive(*owner);
}

}  // namespace maf_sandbox::runtime
