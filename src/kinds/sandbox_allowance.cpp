#include "maf_sandbox/kinds/sandbox_allowance.hpp"

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::kinds {
namespace {

// Each part with its length in front, so no choice of names makes two keys read alike.
void append_part(std::string& into, std::string_view part) {
    into += std::to_string(part.size());
    into += ':';
    into += part;
}

}  // namespace

std::string sandbox_slot(const SandboxKey& key, std::string_view kind) {
    std::string slot;
    append_part(slot, key.scope);
    append_part(slot, key.thread_id);
    append_part(slot, key.agent_dir);
    append_part(slot, key.call_id);
    append_part(slot, kind);
    return slot;
}

SandboxAllowance::SandboxAllowance(std::size_t cap) : cap_(cap) {
    if (cap_ == 0) {
        throw InvalidArgument("a sandbox allowance of 0 lets no call run; give at least 1");
    }
}

std::size_t SandboxAllowance::in_use() const noexcept {
    auto count = held_.size();
    for (const auto& [slot, calls] : pending_) {
        if (held_.count(slot) == 0) {
            ++count;
        }
    }
    return count;
}

std::optional<SandboxAllowance::Claim> SandboxAllowance::claim(const std::string& slot) {
    const bool known = held_.count(slot) != 0 || pending_.count(slot) != 0;
    if (!known && in_use() >= cap_) {
        return std::nullopt;
    }
    ++pending_[slot];
    return Claim(shared_from_this(), slot);
}

void SandboxAllowance::release(const std::string& slot) {
    held_.erase(slot);
}

SandboxAllowance::Claim::Claim(Claim&& other) noexcept
    : owner_(std::move(other.owner_)), slot_(std::move(other.slot_)) {}

SandboxAllowance::Claim& SandboxAllowance::Claim::operator=(Claim&& other) noexcept {
    if (this != &other) {
        drop();
        owner_ = std::move(other.owner_);
        slot_ = std::move(other.slot_);
    }
    return *this;
}

SandboxAllowance::Claim::~Claim() {
    drop();
}

void SandboxAllowance::Claim::drop() noexcept {
    if (!owner_) {
        return;
    }
    auto owner = std::move(owner_);
    const auto found = owner->pending_.find(slot_);
    if (found != owner->pending_.end() && --found->second == 0) {
        owner->pending_.erase(found);
    }
}

void SandboxAllowance::Claim::settle() {
    if (!owner_) {
        return;
    }
    auto owner = owner_;
    owner->held_.insert(slot_);
    drop();
}

}  // namespace maf_sandbox::kinds
