#include "sandbox_pool.hpp"

#include <fmt/format.h>

namespace maf_sandbox::local {

namespace {

std::uint64_t fnv1a(std::string_view text, std::uint64_t hash = 1469598103934665603ull) {
    for (const unsigned char c : text) {
        hash = (hash ^ c) * 1099511628211ull;
    }
    return hash;
}

}  // namespace

std::string SandboxPool::signature(const std::vector<std::string>& parts) {
    std::uint64_t hash = 1469598103934665603ull;
    for (const auto& part : parts) {
        hash = fnv1a(part, hash);
        hash = fnv1a(std::string_view("\0", 1), hash);  // "ab","c" differs from "a","bc"
    }
    return fmt::format("{:016x}", hash);
}

std::map<std::string, std::string> SandboxPool::pool_labels(const std::string& signature) {
    return {{kPoolLabel, signature}};
}

std::optional<runtime::SandboxRecord> SandboxPool::take(
    const std::string& signature, const std::map<std::string, std::string>& labels,
    const std::optional<runtime::SandboxOwner>& owner) {
    auto record = take_pooled(registry_, signature, labels, owner);
    if (record) {
        std::lock_guard guard(mutex_);
        made_.erase(record->id);
    }
    return record;
}

std::size_t SandboxPool::ready_count(const std::string& signature) const {
    std::size_t count = 0;
    const runtime::LabelSelector selector(pool_labels(signature));
    for (const auto& record : registry_.list(selector)) {
        count += record.state == runtime::SandboxState::running ? 1 : 0;
    }
    return count;
}

std::size_t SandboxPool::claim_refills(const std::string& signature) {
    if (!enabled()) {
        return 0;
    }
    const std::size_t ready = ready_count(signature);
    std::lock_guard guard(mutex_);
    auto& flying = in_flight_[signature];
    const std::size_t have = ready + flying;
    const std::size_t need = have >= size_ ? 0 : size_ - have;
    flying += need;
    return need;
}

void SandboxPool::created(const std::string& signature, const std::string& id) {
    std::lock_guard guard(mutex_);
    made_.insert(id);
    if (--in_flight_[signature] == 0) {
        in_flight_.erase(signature);
    }
    idle_.notify_all();
}

void SandboxPool::refill_failed(const std::string& signature) {
    std::lock_guard guard(mutex_);
    if (--in_flight_[signature] == 0) {
        in_flight_.erase(signature);
    }
    idle_.notify_all();
}

void SandboxPool::wait_idle() {
    std::unique_lock guard(mutex_);
    idle_.wait(guard, [&] { return in_flight_.empty(); });
}

std::vector<std::string> SandboxPool::made_here() const {
    std::lock_guard guard(mutex_);
    return {made_.begin(), made_.end()};
}

}  // namespace maf_sandbox::local
