#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "egress_host_names.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"

namespace maf_sandbox::runtime {
namespace {

EgressRule only(const std::string& entry) {
    const auto rules = compile_allowlist({entry});
    EXPECT_EQ(rules.size(), 1u);
    return rules.at(0);
}

TEST(EgressRules, ExactHostMatchesOnlyItselfOnPorts80And443) {
    const auto rule = only("example.com");
    EXPECT_EQ(rule.host, "example.com");
    EXPECT_FALSE(rule.wildcard);
    EXPECT_TRUE(rule.matches("example.com", 80));
    EXPECT_TRUE(rule.matches("example.com", 443));
    EXPECT_FALSE(rule.matches("example.com", 8443));
    EXPECT_FALSE(rule.matches("www.example.com", 443));
    EXPECT_FALSE(rule.matches("notexample.com", 443));
    EXPECT_FALSE(rule.matches("example.com.evil.test", 443));
}

TEST(EgressRules, MatchingIgnoresCaseAndOneTrailingDot) {
    const auto rule = only("Example.COM.");
    EXPECT_EQ(rule.host, "example.com");
    EXPECT_TRUE(rule.matches("EXAMPLE.com", 443));
    EXPECT_TRUE(rule.matches("example.com.", 443));
    EXPECT_FALSE(rule.matches("example.com..", 443));
}

TEST(EgressRules, WildcardMatchesStrictlyBelowItsSuffix) {
    const auto rule = only("*.example.com");
    EXPECT_TRUE(rule.wildcard);
    EXPECT_EQ(rule.host, "example.com");
    EXPECT_TRUE(rule.matches("a.example.com", 443));
    EXPECT_TRUE(rule.matches("a.b.EXAMPLE.com.", 80));
    EXPECT_FALSE(rule.matches("example.com", 443));
    EXPECT_FALSE(rule.matches("badexample.com", 443));
    EXPECT_FALSE(rule.matches("a.example.com", 22));
}

TEST(EgressRules, HostWithPortAllowsExactlyThatPort) {
    const auto rule = only("api.example.com:8443");
    EXPECT_EQ(rule.ports, std::vector<std::uint16_t>{8443});
    EXPECT_TRUE(rule.matches("api.example.com", 8443));
    EXPECT_FALSE(rule.matches("api.example.com", 443));
    EXPECT_TRUE(only("*.example.com:9000").matches("x.example.com", 9000));
}

TEST(EgressRules, MalformedEntriesAreRefusedNamingTheEntry) {
    for (const std::string entry : {"",
                                    "   ",
                                    "http://example.com",
                                    "example.com/path",
                                    "user@example.com",
                                    "example.com:0",
                                    "example.com:65536",
                                    "example.com:",
                                    "example.com:https",
                                    "a.*.example.com",
                                    "*example.com",
                                    "*",
                                    "*.",
                                    "exa mple.com",
                                    "GET example.com",
                                    "127.0.0.1",
                                    "127.1",
                                    "2130706433",
                                    "[::1]:443",
                                    "::1",
                                    "10.0.0.1:8080",
                                    "-bad.example.com",
                                    "bad..example.com",
                                    "exa$mple.com"}) {
        try {
            compile_allowlist({"fine.example.com", entry});
            ADD_FAILURE() << "accepted '" << entry << "'";
        } catch (const InvalidArgument& e) {
            EXPECT_NE(std::string(e.what()).find("'" + entry + "'"), std::string::npos) << e.what();
        }
    }
}

TEST(EgressRules, MethodScopedRuleIsRefusedWithAClearMessage) {
    try {
        compile_allowlist({"POST api.example.com"});
        FAIL() << "a method-scoped rule was accepted";
    } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("method-scoped"), std::string::npos);
    }
}

TEST(EgressRules, HostNamesNormalizeToOneSpelling) {
    EXPECT_EQ(normalize_host_name("A.Example.COM."), "a.example.com");
    EXPECT_FALSE(normalize_host_name("a..b"));
    EXPECT_FALSE(normalize_host_name("1.2.3.4"));
    EXPECT_FALSE(normalize_host_name(std::string(64, 'a') + ".com"));
    EXPECT_FALSE(normalize_host_name(std::string_view("a\0b.com", 7)));
    EXPECT_TRUE(is_ip_literal("[::ffff:127.0.0.1]"));
    EXPECT_TRUE(is_ip_literal("0x7f.1"));
    EXPECT_FALSE(is_ip_literal("example.com"));
}

TEST(EgressPolicy, EqualityIsCaseAndOrderInsensitive) {
    const auto a = EgressPolicy::make(Egress::allowlist, {"B.example.com", "a.example.com"});
    const auto b =
        EgressPolicy::make(Egress::allowlist, {"a.example.com", "b.EXAMPLE.com", "a.example.com"});
    EXPECT_EQ(a, b);
    EXPECT_EQ(a.allow, (std::vector<std::string>{"a.example.com", "b.example.com"}));
    EXPECT_NE(a, EgressPolicy::make(Egress::closed, {"a.example.com", "b.example.com"}));
    EXPECT_NE(a, EgressPolicy::make(Egress::allowlist, {"a.example.com"}));
}

TEST(EgressPolicy, RoundTripsThroughJson) {
    const auto policy = EgressPolicy::make(Egress::allowlist, {"*.example.com", "x.test:8080"});
    EXPECT_EQ(EgressPolicy::from_json(policy.to_json()), policy);
    EXPECT_THROW(EgressPolicy::from_json(boost::json::parse(R"({"mode":"open"})")),
                 InvalidArgument);
    EXPECT_THROW(EgressPolicy::from_json(boost::json::parse(R"({"allow":[]})")), InvalidArgument);
}

TEST(EgressOperatorOptions, RoundTripsThroughJsonAndReadsTheEnvironment) {
    EgressOperatorOptions options;
    options.hosts_file = "/tmp/hosts";
    options.allow_private = true;
    const auto back = EgressOperatorOptions::from_json(options.to_json());
    EXPECT_EQ(back.hosts_file, options.hosts_file);
    EXPECT_TRUE(back.allow_private);
    EXPECT_FALSE(EgressOperatorOptions::from_json(EgressOperatorOptions{}.to_json()).hosts_file);

    ::setenv("MAF_SANDBOX_EGRESS_HOSTS_FILE", "/tmp/egress-hosts", 1);
    ::setenv("MAF_SANDBOX_EGRESS_ALLOW_PRIVATE", "1", 1);
    const auto env = EgressOperatorOptions::from_environment();
    ::unsetenv("MAF_SANDBOX_EGRESS_HOSTS_FILE");
    ::setenv("MAF_SANDBOX_EGRESS_ALLOW_PRIVATE", "yes", 1);
    const auto not_one = EgressOperatorOptions::from_environment();
    ::unsetenv("MAF_SANDBOX_EGRESS_ALLOW_PRIVATE");
    EXPECT_EQ(env.hosts_file, std::filesystem::path("/tmp/egress-hosts"));
    EXPECT_TRUE(env.allow_private);
    EXPECT_FALSE(not_one.allow_private);
    EXPECT_FALSE(not_one.hosts_file);
}

}  // namespace
}  // namespace maf_sandbox::runtime
