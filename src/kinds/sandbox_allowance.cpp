#include "maf_sandbox/kinds/sandbox_allowance.hpp"

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::kinds {

SandboxAllowance::SandboxAllowance(std::size_t cap) : cap_(cap) {
    if (cap_ == 0) {
        throw InvalidArgument("a sandbox allowance of 0 lets no call run; give at least 1");
    }
}

std::optional<SandboxAllowance::Claim> SandboxAllowance::claim() {
    if (in_use() >= cap_) {
        return std::nullopt;
    }
    ++pending_;
    return Claim(shared_from_this());
}

void SandboxAllowance::release() {
    if (held_ > 0) {
        --held_;
    }
}

SandboxAllowance::Claim::Claim(Claim&& other) noexcept : owner_(std::move(other.owner_)) {}

SandboxAllowance::Claim& SandboxAllowance::Claim::operator=(Claim&& other) noexcept {
    if (this != &other) {
        if (owner_) {
            --owner_->pending_;
        }
        owner_ = std::move(other.owner_);
    }
    return *this;
}

SandboxAllowance::Claim::~Claim() {
    if (owner_) {
        --owner_->pending_;
    }
}

void SandboxAllowance::Claim::settle() {
    if (!owner_) {
        return;
    }
    auto owner = std::move(owner_);
    --owner->pending_;
    ++owner->held_;
}

}  // namespace maf_sandbox::kinds
