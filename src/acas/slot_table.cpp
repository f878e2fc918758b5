#include "slot_table.hpp"

#include <fmt/format.h>

namespace maf_sandbox::acas {

std::shared_ptr<HeldSandbox> SlotTable::held(const SlotKey& slot) const {
    std::lock_guard lock(mutex_);
    const auto found = held_.find(slot);
    return found == held_.end() ? nullptr : found->second;
}

std::optional<std::string> SlotTable::held_id(const SlotKey& slot) const {
    std::lock_guard lock(mutex_);
    const auto found = held_.find(slot);
    if (found == held_.end())
        return std::nullopt;
    return found->second->id;
}

void SlotTable::hold(std::shared_ptr<HeldSandbox> sandbox) {
    if (!sandbox)
        return;
    std::lock_guard lock(mutex_);
    if (sandbox->invalidated)
        return;  // invalidated before it was registered: its disposal owes it already
    held_[sandbox->slot()] = std::move(sandbox);
}

bool SlotTable::forget(const std::shared_ptr<HeldSandbox>& sandbox) {
    std::lock_guard lock(mutex_);
    const auto found = held_.find(sandbox->slot());
    if (found == held_.end() || found->second != sandbox)
        return false;
    held_.erase(found);
    return true;
}

std::set<std::string> SlotTable::owed(const SlotKey& slot) const {
    std::lock_guard lock(mutex_);
    const auto found = owed_.find(slot);
    return found == owed_.end() ? std::set<std::string>{} : found->second;
}

bool SlotTable::owes(const SlotKey& slot) const {
    std::lock_guard lock(mutex_);
    return owed_.count(slot) > 0;
}

void SlotTable::owe(const SlotKey& slot, const std::string& id) {
    std::lock_guard lock(mutex_);
    owed_[slot].insert(id);
}

void SlotTable::settle(const SlotKey& slot, const std::string& id) {
    std::lock_guard lock(mutex_);
    const auto found = owed_.find(slot);
    if (found == owed_.end())
        return;
    found->second.erase(id);
    if (found->second.empty())
        owed_.erase(found);
}

bool SlotTable::invalidate(const std::shared_ptr<HeldSandbox>& sandbox, const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (sandbox->invalidated.exchange(true))
        return false;
    const auto slot = sandbox->slot();
    if (const auto found = held_.find(slot); found != held_.end() && found->second == sandbox)
        held_.erase(found);
    owed_[slot].insert(sandbox->id);
    if (sandbox->handed_out) {
        replaced_[slot] = SandboxReplacement{
            sandbox->id, fmt::format("the backend discarded sandbox {} ({}); its files and "
                                     "processes are gone",
                                     sandbox->id, reason)};
    }
    return true;
}

std::optional<SandboxReplacement> SlotTable::take_replacement(const SlotKey& slot) {
    std::lock_guard lock(mutex_);
    const auto found = replaced_.find(slot);
    if (found == replaced_.end())
        return std::nullopt;
    auto notice = std::move(found->second);
    replaced_.erase(found);
    return notice;
}

std::optional<SandboxReplacement> SlotTable::replacement(const SlotKey& slot) const {
    std::lock_guard lock(mutex_);
    const auto found = replaced_.find(slot);
    if (found == replaced_.end())
        return std::nullopt;
    return found->second;
}

std::map<std::string, std::string> SlotTable::take_key(const SandboxKey& key,
                                                       const std::optional<std::string>& kind) {
    const auto matches = [&](const SlotKey& slot) {
        return slot.first == key && (!kind || slot.second == *kind);
    };
    std::map<std::string, std::string> ids;
    std::lock_guard lock(mutex_);
    for (auto it = held_.begin(); it != held_.end();) {
        if (matches(it->first)) {
            ids[it->second->id] = it->first.second;
            it = held_.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = owed_.begin(); it != owed_.end();) {
        if (matches(it->first)) {
            for (const auto& id : it->second)
                ids[id] = it->first.second;
            it = owed_.erase(it);
        } else {
            ++it;
        }
    }
    // The caller discards the state itself: nothing is left to report.
    std::erase_if(replaced_, [&](const auto& entry) { return matches(entry.first); });
    return ids;
}

std::map<std::string, SlotKey> SlotTable::take_conversation(const Conversation& conversation) {
    const auto matches = [&](const SlotKey& slot) {
        return slot.first.scope == conversation.first &&
               slot.first.thread_id == conversation.second;
    };
    std::map<std::string, SlotKey> ids;
    std::lock_guard lock(mutex_);
    for (auto it = held_.begin(); it != held_.end();) {
        if (matches(it->first)) {
            ids.emplace(it->second->id, it->first);
            it = held_.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = owed_.begin(); it != owed_.end();) {
        if (matches(it->first)) {
            for (const auto& id : it->second)
                ids.emplace(id, it->first);
            it = owed_.erase(it);
        } else {
            ++it;
        }
    }
    return ids;
}

std::shared_ptr<detail::AsyncMutex> SlotTable::lock_for(const SlotKey& slot) {
    std::lock_guard lock(mutex_);
    auto& entry = locks_[slot];
    if (!entry)
        entry = std::make_shared<detail::AsyncMutex>();
    return entry;
}

void SlotTable::admit_acquire(const Conversation& conversation) {
    std::lock_guard lock(mutex_);
    if (const auto found = purging_.find(conversation);
        found != purging_.end() && found->second > 0) {
        throw SandboxCleanupPending(
            "a scope purge for this conversation is running; acquire again after it finishes");
    }
    ++acquiring_[conversation];
}

void SlotTable::end_acquire(const Conversation& conversation) {
    std::lock_guard lock(mutex_);
    if (--acquiring_[conversation] == 0)
        acquiring_.erase(conversation);
}

bool SlotTable::admit_purge(const Conversation& conversation) {
    std::lock_guard lock(mutex_);
    if (acquiring_.count(conversation))
        return false;
    ++purging_[conversation];
    return true;
}

void SlotTable::end_purge(const Conversation& conversation) {
    std::lock_guard lock(mutex_);
    if (--purging_[conversation] == 0)
        purging_.erase(conversation);
}

AcquireTicket::AcquireTicket(SlotTable& slots, Conversation conversation)
    : slots_(slots), conversation_(std::move(conversation)) {
    slots_.admit_acquire(conversation_);
}

AcquireTicket::~AcquireTicket() {
    slots_.end_acquire(conversation_);
}

}  // namespace maf_sandbox::acas
