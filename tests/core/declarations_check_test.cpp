// The declarations check the router and direct backend callers share: a spec the declarations do
// not cover is refused with the same type either way.
#include "maf_sandbox/core/declarations_check.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/in_process.hpp"
#include "maf_sandbox/core/router.hpp"

namespace maf_sandbox {
namespace {

SandboxSpec spec_with(const std::function<void(SandboxSpecFields&)>& tweak) {
    SandboxSpecFields fields;
    fields.kind = "probe";
    fields.egress = Egress::closed;
    fields.requires_capabilities = {Capability::files_in};  // declared by the fake
    tweak(fields);
    return SandboxSpec(std::move(fields));
}

// The name of the error a call throws ("" when it returns).
std::string thrown(const std::function<void()>& call) {
    try {
        call();
    } catch (const Error& e) {
        return std::string(e.type_name());
    }
    return "";
}

TEST(EnsureDeclared, RefusesWhatTheDeclarationsDoNotCoverExactlyAsTheRouterDoes) {
    auto declarations = in_process_default_declarations();
    declarations.os_families = {OsFamily::posix};
    InProcessBackendOptions options;
    options.isolation = Isolation::microvm;
    options.declarations = declarations;
    auto backend = std::make_shared<InProcessSandboxBackend>(nullptr, options);
    SandboxRouter router({backend});

    const std::vector<std::pair<std::string, std::function<void(SandboxSpecFields&)>>> cases = {
        {"SandboxCapabilityNotSupported",
         [](auto& f) { f.requires_capabilities.insert(Capability::exec); }},
        {"SandboxCapabilityNotSupported",
         [](auto& f) {
             f.egress = Egress::allowlist;
             f.egress_allow = {"GET example.com"};
         }},
        {"SandboxTransferLimitsNotPermitted",
         [](auto& f) {
             f.files_in.max_bytes_per_file = kDefaultTransferLimits.max_bytes_per_file + 1;
         }},
        {"SandboxEgressNotEnforced", [](auto& f) { f.egress = Egress::unrestricted; }},
        {"", [](auto&) {}},
    };
    for (const auto& [expected, tweak] : cases) {
        const auto spec = spec_with(tweak);
        EXPECT_EQ(thrown([&] { ensure_declared(spec, backend->name(), declarations); }), expected);
        EXPECT_EQ(thrown([&] { router.ensure_can_serve(spec); }), expected);
    }
}

TEST(EnsureDeclared, TheHostScopeRaisesTheScopeTheBackendMustServe) {
    auto declarations = in_process_default_declarations();
    declarations.isolation_scopes = {IsolationScope::conversation};
    const auto spec = spec_with([](auto&) {});
    EXPECT_NO_THROW(ensure_declared(spec, "b", declarations));
    EXPECT_THROW(ensure_declared(spec, "b", declarations, IsolationScope::call),
                 SandboxIsolationScopeNotSupported);
}

TEST(MethodScopedRules, NamesOnlyTheRulesThatCarryAMethodInOrder) {
    const auto spec = spec_with([](auto& f) {
        f.egress = Egress::allowlist;
        f.egress_allow = {"pypi.org", "POST api.example.com", "GET files.example.com"};
    });
    EXPECT_EQ(method_scoped_rules(spec),
              (std::vector<std::string>{"POST api.example.com", "GET files.example.com"}));
}

}  // namespace
}  // namespace maf_sandbox
