#include "maf_sandbox/core/labels.hpp"

#include <gtest/gtest.h>

#include <string>

namespace maf_sandbox {
namespace {

constexpr std::string_view kPrefix = "sha256-";

bool looks_hashed(const std::string& value) {
    if (value.size() != kPrefix.size() + 48 || !value.starts_with(kPrefix)) {
        return false;
    }
    for (char c : value.substr(kPrefix.size())) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return false;
        }
    }
    return true;
}

TEST(LabelValue, A63CharacterSafeValueIsKeptVerbatim) {
    const std::string value(63, 'a');
    EXPECT_EQ(label_value(value), value);
    EXPECT_EQ(label_value("thread-1.A_b"), "thread-1.A_b");
}

TEST(LabelValue, A64CharacterValueIsHashedToPrefixAnd48HexDigits) {
    const std::string value(64, 'a');
    const auto label = label_value(value);
    EXPECT_TRUE(looks_hashed(label)) << label;
    // SHA-256 of 64 'a's, first 48 hex digits.
    EXPECT_EQ(label, "sha256-ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5");
}

TEST(LabelValue, UnsafeCharactersAreHashedEvenWhenShort) {
    EXPECT_EQ(label_value("abc def"), "sha256-010971ea0013a09d91df437de2cd6f66df4dbdf789749261");
    EXPECT_TRUE(looks_hashed(label_value("a/b")));
    EXPECT_TRUE(looks_hashed(label_value("caf\xc3\xa9")));
    EXPECT_TRUE(looks_hashed(label_value("a:b")));
}

TEST(LabelValue, LongValuesAreNeverTruncatedSoSharedPrefixesStayDistinct) {
    const std::string shared(63, 'x');
    const auto first = label_value(shared + "1");
    const auto second = label_value(shared + "2");
    EXPECT_NE(first, second);
    EXPECT_FALSE(first.starts_with("xxx"));
    EXPECT_LE(first.size(), kMaxLabelValueLength);
}

TEST(LabelValue, AValueThatLooksHashedIsHashedAgain) {
    EXPECT_EQ(label_value("sha256-0123"),
              "sha256-b3f7143c2f4405cc3b4aa1ca0c8106b59166ef9559870f01");
    const auto once = label_value(std::string(80, 'z'));
    const auto twice = label_value(once);
    EXPECT_TRUE(looks_hashed(twice));
    EXPECT_NE(once, twice);
}

TEST(LabelValue, HashingIsDeterministic) {
    EXPECT_EQ(label_value(std::string(100, 'q')), label_value(std::string(100, 'q')));
}

TEST(SandboxLabels, CarryTheKeyAndKindAndHashWhereNeeded) {
    SandboxSpecFields fields;
    fields.kind = "codeact";
    fields.labels = {{"team", "data science"}, {"tier", "gold"}};
    const SandboxSpec spec(fields);
    const SandboxKey key{"tenant-a", std::string(70, 't'), "agents.main", ""};

    const auto labels = sandbox_labels(key, spec);
    EXPECT_EQ(labels.at("scope"), "tenant-a");
    EXPECT_EQ(labels.at("thread"), label_value(std::string(70, 't')));
    EXPECT_TRUE(looks_hashed(labels.at("thread")));
    EXPECT_EQ(labels.at("agent"), "agents.main");
    EXPECT_EQ(labels.at("kind"), "codeact");
    EXPECT_EQ(labels.at("tier"), "gold");
    EXPECT_TRUE(looks_hashed(labels.at("team")));
    EXPECT_EQ(labels.count("call"), 0U);
}

TEST(SandboxLabels, CallLabelOnlyWhenTheKeyNamesACall) {
    SandboxSpecFields fields;
    fields.kind = "shell";
    const SandboxKey key{"s", "t", "a", "call_42"};
    EXPECT_EQ(sandbox_labels(key, SandboxSpec(fields)).at("call"), "call_42");
}

TEST(SandboxLabels, ExtraLabelsCannotOverwriteIdentityLabels) {
    SandboxSpecFields fields;
    fields.kind = "shell";
    fields.labels = {{"thread", "someone-else"}, {"scope", "other"}, {"call", "forged"}};
    const SandboxKey key{"s", "t", "a", ""};
    const auto labels = sandbox_labels(key, SandboxSpec(fields));
    EXPECT_EQ(labels.at("thread"), "t");
    EXPECT_EQ(labels.at("scope"), "s");
    EXPECT_EQ(labels.count("call"), 0U);
}

TEST(ScopeSelector, SelectsByScopeAndThreadThroughTheSameHashing) {
    const auto selector = scope_selector("tenant a", "t1");
    EXPECT_EQ(selector.size(), 2U);
    EXPECT_EQ(selector.at("scope"), label_value("tenant a"));
    EXPECT_EQ(selector.at("thread"), "t1");

    SandboxSpecFields fields;
    fields.kind = "shell";
    const auto labels = sandbox_labels(SandboxKey{"tenant a", "t1", "a", ""}, SandboxSpec(fields));
    for (const auto& [name, value] : selector) {
        EXPECT_EQ(labels.at(name), value) << name;
    }
}

}  // namespace
}  // namespace maf_sandbox

namespace maf_sandbox {
namespace {

TEST(IdentityLabels, TheTableNamesEveryLabelSandboxLabelsStampsFromTheKey) {
    SandboxSpecFields fields;
    fields.kind = "shell";
    fields.labels = {{"tier", "gold"}};
    const auto labels = sandbox_labels(SandboxKey{"s", "t", "a", "c"}, SandboxSpec(fields));
    for (const auto name : kIdentityLabels) {
        EXPECT_TRUE(labels.count(std::string(name))) << name;
        EXPECT_TRUE(is_identity_label(name)) << name;
    }
    EXPECT_EQ(labels.size(), kIdentityLabels.size() + 1);  // and the spec's one extra
    EXPECT_FALSE(is_identity_label("tier"));
    EXPECT_FALSE(is_identity_label("Scope"));
}

TEST(KeySelector, SelectsWhatSandboxLabelsStampedForThatKeyAndKind) {
    SandboxSpecFields fields;
    fields.kind = "codeact";
    const SandboxKey conversation{"tenant a", "t1", "agents.main", ""};
    const SandboxKey call{"tenant a", "t1", "agents.main", "call_7"};
    const auto stamped = sandbox_labels(conversation, SandboxSpec(fields));
    const auto call_stamped = sandbox_labels(call, SandboxSpec(fields));

    EXPECT_TRUE(labels_match_key(stamped, conversation, std::string("codeact")));
    EXPECT_TRUE(labels_match_key(stamped, conversation, std::nullopt));
    EXPECT_FALSE(labels_match_key(stamped, conversation, std::string("shell")));
    EXPECT_FALSE(
        labels_match_key(stamped, SandboxKey{"tenant a", "t2", "agents.main", ""}, std::nullopt));
    // A conversation key never selects a call-scoped sandbox; a call key selects only its call.
    EXPECT_FALSE(labels_match_key(call_stamped, conversation, std::nullopt));
    EXPECT_TRUE(labels_match_key(call_stamped, call, std::string("codeact")));
    EXPECT_FALSE(labels_match_key(stamped, call, std::nullopt));

    const auto selector = key_selector(call, std::string("codeact"));
    for (const auto& [name, value] : selector) {
        EXPECT_EQ(call_stamped.at(name), value) << name;
    }
    EXPECT_EQ(key_selector(conversation, std::nullopt).count(std::string(identity_label::call)),
              0U);
    EXPECT_EQ(key_selector(conversation, std::nullopt).count(std::string(identity_label::kind)),
              0U);
}

}  // namespace
}  // namespace maf_sandbox
