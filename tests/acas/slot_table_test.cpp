// The slot table's invariants, on the table alone: one sandbox per slot and never an invalidated
// one, owed deletions until settled, a replacement notice only for a handed-out sandbox and only
// once, and acquires and purges of one conversation never admitted together.
#include <gtest/gtest.h>

#include "maf_sandbox/core/errors.hpp"
#include "slot_table.hpp"

namespace maf_sandbox::acas {
namespace {

const SandboxKey kKey{"scope-1", "thread-1", "agent-1", ""};

std::shared_ptr<HeldSandbox> sandbox(std::string id, std::string kind = "shell",
                                     SandboxKey key = kKey) {
    auto held = std::make_shared<HeldSandbox>();
    held->id = std::move(id);
    held->key = std::move(key);
    held->kind = std::move(kind);
    return held;
}

TEST(SlotTable, AnInvalidatedSandboxLeavesItsSlotAndItsDeletionIsOwedUntilSettled) {
    SlotTable slots;
    const auto held = sandbox("sb-1");
    slots.hold(held);
    EXPECT_EQ(slots.held_id(held->slot()), "sb-1");

    EXPECT_TRUE(slots.invalidate(held, "an exec failed"));
    EXPECT_TRUE(held->invalidated);
    EXPECT_EQ(slots.held(held->slot()), nullptr);
    EXPECT_TRUE(slots.owes(held->slot()));
    EXPECT_EQ(slots.owed(held->slot()), std::set<std::string>{"sb-1"});
    // A second invalidation (another failure racing the first) disposes nothing twice.
    EXPECT_FALSE(slots.invalidate(held, "a probe failed"));
    // Registering it again cannot bring an invalidated sandbox back into use.
    slots.hold(held);
    EXPECT_EQ(slots.held(held->slot()), nullptr);

    slots.settle(held->slot(), "sb-1");
    EXPECT_FALSE(slots.owes(held->slot()));
    EXPECT_TRUE(slots.owed(held->slot()).empty());
}

TEST(SlotTable, ForgettingASandboxLeavesTheOneThatTookItsPlaceAndNoEmptySlot) {
    SlotTable slots;
    const auto first = sandbox("sb-1");
    const auto second = sandbox("sb-2");
    EXPECT_FALSE(slots.forget(first));  // never held: nothing happens
    EXPECT_FALSE(slots.held_id(first->slot()));
    slots.hold(first);
    slots.hold(second);
    EXPECT_FALSE(slots.forget(first));
    EXPECT_EQ(slots.held_id(first->slot()), "sb-2");
    EXPECT_TRUE(slots.forget(second));
    EXPECT_FALSE(slots.held_id(first->slot()));
    EXPECT_EQ(slots.held(first->slot()), nullptr);
}

TEST(SlotTable, AReplacementNoticeIsKeptOnlyForAHandedOutSandboxAndTakenOnce) {
    SlotTable slots;
    const auto never_handed = sandbox("sb-1");
    slots.hold(never_handed);
    slots.invalidate(never_handed, "the capture probe failed");
    EXPECT_FALSE(slots.take_replacement(never_handed->slot()));

    const auto used = sandbox("sb-2");
    used->handed_out = true;
    slots.hold(used);
    slots.invalidate(used, "an exec failed in flight");
    const auto notice = slots.take_replacement(used->slot());
    ASSERT_TRUE(notice);
    EXPECT_EQ(notice->previous_id, "sb-2");
    EXPECT_NE(notice->reason.find("an exec failed in flight"), std::string::npos);
    EXPECT_NE(notice->reason.find("gone"), std::string::npos);
    EXPECT_FALSE(slots.take_replacement(used->slot()));
}

TEST(SlotTable, TakingAKeyTakesItsHeldAndOwedSandboxesOfOneKindOrEveryKind) {
    SlotTable slots;
    const auto shell = sandbox("sb-shell");
    const auto codeact = sandbox("sb-codeact", "codeact");
    const auto other_key = sandbox("sb-other", "shell", {"scope-1", "thread-1", "agent-2", ""});
    shell->handed_out = true;
    slots.hold(shell);
    slots.hold(codeact);
    slots.hold(other_key);
    slots.invalidate(shell, "an exec failed");  // owed, with a notice
    slots.hold(sandbox("sb-shell-2"));

    const auto shells = slots.take_key(kKey, std::string("shell"));
    EXPECT_EQ(shells,
              (std::map<std::string, std::string>{{"sb-shell", "shell"}, {"sb-shell-2", "shell"}}));
    EXPECT_FALSE(slots.owes({kKey, "shell"}));
    EXPECT_FALSE(slots.held_id({kKey, "shell"}));
    EXPECT_FALSE(slots.take_replacement({kKey, "shell"}));  // the caller discards state itself
    EXPECT_EQ(slots.held_id({kKey, "codeact"}), "sb-codeact");

    const auto rest = slots.take_key(kKey, std::nullopt);
    EXPECT_EQ(rest, (std::map<std::string, std::string>{{"sb-codeact", "codeact"}}));
    EXPECT_EQ(slots.held_id(other_key->slot()), "sb-other");
}

TEST(SlotTable, TakingAConversationTakesEveryKeyOfItAndNoOtherConversation) {
    SlotTable slots;
    const auto a = sandbox("sb-a", "shell", {"scope-1", "thread-1", "agent-1", ""});
    const auto b = sandbox("sb-b", "shell", {"scope-1", "thread-1", "agent-2", "call-9"});
    const auto other = sandbox("sb-c", "shell", {"scope-1", "thread-2", "agent-1", ""});
    slots.hold(a);
    slots.hold(b);
    slots.hold(other);
    slots.owe(a->slot(), "sb-old");

    const auto taken = slots.take_conversation({"scope-1", "thread-1"});
    ASSERT_EQ(taken.size(), 3u);
    EXPECT_EQ(taken.at("sb-a"), a->slot());
    EXPECT_EQ(taken.at("sb-b"), b->slot());
    EXPECT_EQ(taken.at("sb-old"), a->slot());
    EXPECT_FALSE(slots.owes(a->slot()));
    EXPECT_EQ(slots.held_id(other->slot()), "sb-c");
}

TEST(SlotTable, AnAcquireAndAPurgeOfOneConversationAreNeverAdmittedTogether) {
    SlotTable slots;
    const Conversation conversation{"scope-1", "thread-1"};
    {
        AcquireTicket acquiring(slots, conversation);
        EXPECT_FALSE(slots.admit_purge(conversation));
        // Another conversation is not held back.
        EXPECT_TRUE(slots.admit_purge({"scope-1", "thread-2"}));
        slots.end_purge({"scope-1", "thread-2"});
        AcquireTicket second(slots, conversation);  // acquires of one conversation overlap
    }
    ASSERT_TRUE(slots.admit_purge(conversation));
    {
        PurgeTicket purging(slots, conversation);
        EXPECT_THROW(AcquireTicket(slots, conversation), SandboxCleanupPending);
        EXPECT_THROW(AcquireTicket(slots, conversation), SandboxTransientError);
        AcquireTicket elsewhere(slots, {"scope-2", "thread-1"});
    }
    AcquireTicket after(slots, conversation);  // the purge ended: admitted again
    SUCCEED();
}

TEST(SlotTable, EachSlotHasOneAcquireLock) {
    SlotTable slots;
    const auto lock = slots.lock_for({kKey, "shell"});
    EXPECT_EQ(slots.lock_for({kKey, "shell"}), lock);
    EXPECT_NE(slots.lock_for({kKey, "codeact"}), lock);
}

}  // namespace
}  // namespace maf_sandbox::acas
