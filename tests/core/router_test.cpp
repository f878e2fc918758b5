#include "maf_sandbox/core/router.hpp"

#include <gtest/gtest.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <functional>
#include <string>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox {
namespace {

using namespace std::chrono_literals;

// A sandbox that only records reclaim calls; nothing else is reached by the router.
class RecordingSandbox : public Sandbox {
  public:
    std::string base_directory() const override { return "/base"; }
    Task<ExecResult> exec(ExecRequest) override { throw NotImplemented("exec"); }
    Task<ExecResult> run_code(std::string, Seconds) override { throw NotImplemented("run_code"); }
    Task<void> write_file(std::string, std::string, std::string) override {
        throw NotImplemented("write_file");
    }
    Task<std::optional<SandboxEntry>> stat_file(std::string, std::string) override {
        throw NotImplemented("stat_file");
    }
    Task<std::string> read_file(std::string, std::string, std::uint64_t) override {
        throw NotImplemented("read_file");
    }
    Task<std::vector<SandboxEntry>> list_dir(std::string, std::string) override {
        throw NotImplemented("list_dir");
    }
    Task<void> remove(std::string, std::string, bool) override { throw NotImplemented("remove"); }
    Task<void> reclaim(std::string directory, std::string working_directory, Seconds) override {
        reclaimed.emplace_back(directory, working_directory);
        if (fail_reclaim) {
            throw FileError("rm -rf exited 1: permission denied");
        }
        co_return;
    }

    std::vector<std::pair<std::string, std::string>> reclaimed;
    bool fail_reclaim = false;
};

// A backend whose declarations and disposal behaviour each test sets directly.
class ScriptedBackend : public SandboxBackend {
  public:
    ScriptedBackend(std::string name, Isolation rung) : name_(std::move(name)), rung_(rung) {}

    std::string name() const override { return name_; }
    Isolation isolation() const override { return rung_; }
    BackendDeclarations declarations() const override { return declarations_; }

    Task<std::shared_ptr<Sandbox>> acquire(SandboxKey key, SandboxSpec spec) override {
        acquired.emplace_back(std::move(key), std::move(spec));
        co_return sandbox;
    }

    Task<std::optional<DisposalFailure>> dispose(SandboxKey key,
                                                 std::optional<std::string> kind) override {
        disposed.emplace_back(std::move(key), std::move(kind));
        if (dispose_hangs) {
            boost::asio::steady_timer forever(co_await boost::asio::this_coro::executor, 1h);
            co_await forever.async_wait(boost::asio::use_awaitable);
        }
        if (dispose_throws) {
            throw std::runtime_error("service unreachable at https://secret.example");
        }
        co_return dispose_failure;
    }

    Task<ScopePurge> dispose_scope(std::string scope, std::string thread_id) override {
        purged.emplace_back(std::move(scope), std::move(thread_id));
        if (dispose_throws) {
            throw std::runtime_error("listing by label failed");
        }
        co_return purge;
    }

    Task<void> close() override { co_return; }

    BackendDeclarations declarations_;
    std::shared_ptr<RecordingSandbox> sandbox = std::make_shared<RecordingSandbox>();
    std::vector<std::pair<SandboxKey, SandboxSpec>> acquired;
    std::vector<std::pair<SandboxKey, std::optional<std::string>>> disposed;
    std::vector<std::pair<std::string, std::string>> purged;
    std::optional<DisposalFailure> dispose_failure;
    ScopePurge purge;
    bool dispose_throws = false;
    bool dispose_hangs = false;

  private:
    std::string name_;
    Isolation rung_;
};

// A microvm backend that serves the default spec: {exec, files_in}, egress closed.
std::shared_ptr<ScriptedBackend> capable(std::string name = "capable",
                                         Isolation rung = Isolation::microvm) {
    auto backend = std::make_shared<ScriptedBackend>(std::move(name), rung);
    backend->declarations_.egress_modes = {Egress::closed};
    return backend;
}

SandboxSpec spec_of(std::function<void(SandboxSpecFields&)> edit = {}) {
    SandboxSpecFields fields;
    fields.kind = "shell";
    if (edit) {
        edit(fields);
    }
    return SandboxSpec(std::move(fields));
}

SandboxRouterOptions options(const std::function<void(SandboxRouterOptions&)>& edit) {
    SandboxRouterOptions result;
    edit(result);
    return result;
}

const SandboxKey kKey{"tenant", "thread-1", "agent", ""};

// The refusal `check` throws, as "Type: message" ("" when it does not throw).
template <typename Check>
std::string refusal_of(Check check) {
    try {
        check();
    } catch (const Error& e) {
        return std::string(e.type_name()) + ": " + e.what();
    }
    return "";
}

// --- Construction --------------------------------------------------------------------------------

TEST(RouterConstruction, TheDefaultFloorIsMicrovm) {
    EXPECT_THROW(SandboxRouter({capable("local", Isolation::container)}),
                 SandboxBackendNotPermitted);
    EXPECT_NO_THROW(SandboxRouter({capable("acas", Isolation::microvm)}));
    EXPECT_NO_THROW(SandboxRouter({capable("azure-vm", Isolation::vm)}));
}

TEST(RouterConstruction, ABelowFloorRefusalNamesRungFloorAndRemedy) {
    const auto message =
        refusal_of([] { SandboxRouter({capable("local", Isolation::container)}); });
    EXPECT_NE(message.find("SandboxBackendNotPermitted"), std::string::npos);
    EXPECT_NE(message.find("'local'"), std::string::npos);
    EXPECT_NE(message.find("'container'"), std::string::npos);
    EXPECT_NE(message.find("'microvm'"), std::string::npos);
    EXPECT_NE(message.find("lower the floor"), std::string::npos);
}

TEST(RouterConstruction, AnExplicitlyLoweredFloorAdmitsAWeakerBackend) {
    SandboxRouter router({capable("local", Isolation::container)},
                         options([](auto& o) { o.min_isolation = Isolation::container; }));
    EXPECT_TRUE(router.enabled());
    EXPECT_EQ(router.backend()->name(), "local");
}

TEST(RouterConstruction, AnUnknownSelectionNamesTheRegisteredBackendsSorted) {
    const auto message = refusal_of([] {
        SandboxRouter({capable("zeta"), capable("alpha"), capable("mid")},
                      options([](auto& o) { o.selected = "acas"; }));
    });
    EXPECT_NE(message.find("NoSandboxBackend"), std::string::npos) << message;
    EXPECT_NE(message.find("'acas'"), std::string::npos) << message;
    EXPECT_NE(message.find("alpha, mid, zeta"), std::string::npos) << message;
}

TEST(RouterConstruction, AWeakUnselectedBackendIsHarmless) {
    SandboxRouter router({capable("fake", Isolation::none), capable("acas")},
                         options([](auto& o) { o.selected = "acas"; }));
    EXPECT_EQ(router.backend()->name(), "acas");
}

TEST(RouterConstruction, ThereIsNoFallbackToAStrongerBackend) {
    // The first backend is selected; that a later one would pass does not rescue it.
    EXPECT_THROW(SandboxRouter({capable("local", Isolation::container), capable("acas")}),
                 SandboxBackendNotPermitted);
    EXPECT_THROW(SandboxRouter({capable("local", Isolation::container), capable("acas")},
                               options([](auto& o) { o.selected = "local"; })),
                 SandboxBackendNotPermitted);
}

TEST(RouterConstruction, NoBackendsDisablesTheRouterAndAcquireRefuses) {
    SandboxRouter router({});
    EXPECT_FALSE(router.enabled());
    EXPECT_EQ(router.backend(), nullptr);
    EXPECT_NO_THROW(router.ensure_can_serve(spec_of()));
    EXPECT_THROW(run_blocking(router.acquire(kKey, spec_of())), NoSandboxBackend);
}

TEST(RouterConstruction, ANullBackendIsRefused) {
    EXPECT_THROW(SandboxRouter({nullptr}), InvalidArgument);
}

// --- Per-spec refusals and their order -----------------------------------------------------------

// A host and backend pair, and a spec that fails every check; the test then repairs one
// check at a time and expects exactly the next refusal in the documented order.
TEST(RouterPolicy, RefusalsApplyInTheDocumentedOrder) {
    auto backend = capable("acas");
    backend->declarations_.capabilities = {Capability::exec, Capability::files_in};
    SandboxRouter router({backend}, options([](auto& o) {
                             o.denied_capabilities = {Capability::snapshot};
                             o.denied_identities = {Identity::user};
                         }));

    SandboxSpecFields fields;
    fields.kind = "shell";
    fields.requires_capabilities = {Capability::exec, Capability::files_in, Capability::snapshot,
                                    Capability::run_code};
    fields.host_tools = HostToolAggregate{};
    fields.host_tools->identities = {Identity::user};
    fields.min_isolation = Isolation::vm;
    fields.egress = Egress::allowlist;
    fields.egress_allow = {"pypi.org", "GET example.com"};
    fields.isolation_scope = IsolationScope::call;
    fields.requires_os_family = OsFamily::windows;
    fields.files_in.max_files = 1000;
    fields.files_out.max_files = 1000;

    auto next = [&] { return refusal_of([&] { router.ensure_can_serve(SandboxSpec(fields)); }); };
    auto expect_next = [&](std::string_view type, std::string_view fragment) {
        const auto message = next();
        EXPECT_TRUE(message.starts_with(type)) << message;
        EXPECT_NE(message.find(fragment), std::string::npos) << message;
    };

    expect_next("SandboxCapabilityDenied", "snapshot");
    fields.requires_capabilities.erase(Capability::snapshot);
    expect_next("SandboxIdentityDenied", "user");
    fields.host_tools.reset();
    expect_next("SandboxBackendNotPermitted", "'vm'");
    fields.min_isolation.reset();
    expect_next("SandboxCapabilityNotSupported", "run_code");
    fields.requires_capabilities.erase(Capability::run_code);
    expect_next("SandboxCapabilityNotSupported", "method-scoped egress rules (GET example.com)");
    fields.egress_allow = {"pypi.org"};
    expect_next("SandboxIsolationScopeNotSupported", "'call'");
    fields.isolation_scope = IsolationScope::conversation;
    expect_next("SandboxOsFamilyNotSupported", "'windows'");
    fields.requires_os_family.reset();
    expect_next("SandboxTransferLimitsNotPermitted", "files_in");
    fields.files_in = kDefaultTransferLimits;
    expect_next("SandboxTransferLimitsNotPermitted", "files_out");
    fields.files_out = kDefaultTransferLimits;
    expect_next("SandboxEgressNotEnforced", "'allowlist'");
    fields.egress = Egress::closed;
    fields.egress_allow.clear();
    EXPECT_EQ(next(), "");
}

TEST(RouterPolicy, ADeniedCapabilityNamesWhatWasAskedAndWhatTheHostDenies) {
    SandboxRouter router({capable()}, options([](auto& o) {
                             o.denied_capabilities = {Capability::host_tools, Capability::exec};
                         }));
    const auto message = refusal_of([&] { router.ensure_can_serve(spec_of()); });
    EXPECT_NE(message.find("requires capabilities the host denies: exec"), std::string::npos)
        << message;
    EXPECT_NE(message.find("the host denies: exec, host_tools"), std::string::npos) << message;
}

TEST(RouterPolicy, MissingCapabilitiesNameMissingAndDeclaredSorted) {
    auto backend = capable();
    backend->declarations_.capabilities = {Capability::files_in, Capability::exec};
    SandboxRouter router({backend});
    const auto message = refusal_of([&] {
        router.ensure_can_serve(spec_of([](auto& f) {
            f.requires_capabilities = {Capability::files_out, Capability::exec,
                                       Capability::files_list};
        }));
    });
    EXPECT_NE(message.find("does not declare: files_list, files_out"), std::string::npos)
        << message;
    EXPECT_NE(message.find("it declares: exec, files_in"), std::string::npos) << message;
}

TEST(RouterPolicy, SilentDeclarationsEnforceNoEgressAndNoOsFamily) {
    auto backend = std::make_shared<ScriptedBackend>("silent", Isolation::microvm);
    SandboxRouter router({backend});
    const auto message = refusal_of([&] { router.ensure_can_serve(spec_of()); });
    EXPECT_TRUE(message.starts_with("SandboxEgressNotEnforced")) << message;
    EXPECT_NE(message.find("enforces nothing"), std::string::npos) << message;

    backend->declarations_.egress_modes = {Egress::closed};
    EXPECT_NO_THROW(router.ensure_can_serve(spec_of()));
    EXPECT_THROW(
        router.ensure_can_serve(spec_of([](auto& f) { f.requires_os_family = OsFamily::posix; })),
        SandboxOsFamilyNotSupported);
}

TEST(RouterPolicy, EgressIsMembershipNeverSubstitution) {
    auto backend = capable();
    backend->declarations_.egress_modes = {Egress::closed};
    SandboxRouter router({backend});
    // A backend that could confine more still does not serve an unrestricted spec.
    const auto message = refusal_of([&] {
        router.ensure_can_serve(spec_of([](auto& f) { f.egress = Egress::unrestricted; }));
    });
    EXPECT_NE(message.find("enforces only: closed"), std::string::npos) << message;
}

TEST(RouterPolicy, TransferLimitsAreRefusedNeverClamped) {
    auto backend = capable();
    backend->declarations_.limits.files_out = {1024, 4096, 4};
    SandboxRouter router({backend});
    const auto message = refusal_of([&] { router.ensure_can_serve(spec_of()); });
    EXPECT_TRUE(message.starts_with("SandboxTransferLimitsNotPermitted")) << message;
    EXPECT_NE(message.find("files_out"), std::string::npos);
    EXPECT_NE(message.find("at most 1024 bytes per file, 4096 bytes in total, 4 files"),
              std::string::npos)
        << message;
    EXPECT_NO_THROW(router.ensure_can_serve(spec_of([](auto& f) {
        f.files_out = TransferLimits{1024, 4096, 4};
    })));
}

TEST(RouterPolicy, SpecMinIsolationRaisesTheFloorAndNeverLowersIt) {
    SandboxRouter microvm_floor({capable("acas", Isolation::microvm)});
    EXPECT_THROW(
        microvm_floor.ensure_can_serve(spec_of([](auto& f) { f.min_isolation = Isolation::vm; })),
        SandboxBackendNotPermitted);
    EXPECT_NO_THROW(microvm_floor.ensure_can_serve(
        spec_of([](auto& f) { f.min_isolation = Isolation::none; })));

    // A host that lowered its floor to admit a container is not lowered further by a spec, and a
    // spec asking for less than the host's floor does not admit anything weaker.
    auto local = capable("local", Isolation::container);
    SandboxRouter container_floor({local},
                                  options([](auto& o) { o.min_isolation = Isolation::container; }));
    EXPECT_NO_THROW(container_floor.ensure_can_serve(
        spec_of([](auto& f) { f.min_isolation = Isolation::none; })));
    EXPECT_THROW(container_floor.ensure_can_serve(
                     spec_of([](auto& f) { f.min_isolation = Isolation::microvm; })),
                 SandboxBackendNotPermitted);
    auto fake = capable("fake", Isolation::none);
    EXPECT_THROW(
        SandboxRouter({fake}, options([](auto& o) { o.min_isolation = Isolation::container; })),
        SandboxBackendNotPermitted);
}

TEST(RouterPolicy, TheHostIsolationScopeIsRaiseOnly) {
    auto conversation_only = capable();
    SandboxRouter call_host({conversation_only},
                            options([](auto& o) { o.min_isolation_scope = IsolationScope::call; }));
    // A conversation-scoped spec runs at the host's `call` scope, which this backend cannot serve.
    const auto message = refusal_of([&] { call_host.ensure_can_serve(spec_of()); });
    EXPECT_TRUE(message.starts_with("SandboxIsolationScopeNotSupported")) << message;
    EXPECT_NE(message.find("serves only: conversation"), std::string::npos) << message;

    // A spec asking for `call` is not lowered by a `conversation` host either.
    SandboxRouter conversation_host({conversation_only});
    EXPECT_THROW(conversation_host.ensure_can_serve(
                     spec_of([](auto& f) { f.isolation_scope = IsolationScope::call; })),
                 SandboxIsolationScopeNotSupported);

    auto both = capable();
    both->declarations_.isolation_scopes = {IsolationScope::conversation, IsolationScope::call};
    SandboxRouter served({both},
                         options([](auto& o) { o.min_isolation_scope = IsolationScope::call; }));
    EXPECT_NO_THROW(served.ensure_can_serve(spec_of()));
}

TEST(RouterPolicy, MethodScopedEgressRulesNeedEgressMethods) {
    auto backend = capable();
    backend->declarations_.egress_modes = {Egress::allowlist};
    const auto methods_spec = spec_of([](auto& f) {
        f.egress = Egress::allowlist;
        f.egress_allow = {"GET api.example.com"};
    });
    SandboxRouter router({backend});
    EXPECT_THROW(router.ensure_can_serve(methods_spec), SandboxCapabilityNotSupported);
    // Whole-host rules need nothing extra.
    EXPECT_NO_THROW(router.ensure_can_serve(spec_of([](auto& f) {
        f.egress = Egress::allowlist;
        f.egress_allow = {"api.example.com"};
    })));

    backend->declarations_.capabilities.insert(Capability::egress_methods);
    EXPECT_NO_THROW(router.ensure_can_serve(methods_spec));
    // A host that denies egress_methods refuses method-scoped rules before asking the backend.
    SandboxRouter denying(
        {backend}, options([](auto& o) { o.denied_capabilities = {Capability::egress_methods}; }));
    EXPECT_THROW(denying.ensure_can_serve(methods_spec), SandboxCapabilityDenied);
}

TEST(MethodScopedEgressRule, IsAMethodAndAHostSeparatedByWhitespace) {
    EXPECT_TRUE(is_method_scoped_egress_rule("GET example.com"));
    EXPECT_TRUE(is_method_scoped_egress_rule("POST\tapi.example.com"));
    EXPECT_FALSE(is_method_scoped_egress_rule("example.com"));
    EXPECT_FALSE(is_method_scoped_egress_rule("  example.com  "));
    EXPECT_FALSE(is_method_scoped_egress_rule(""));
}

// --- Acquire -------------------------------------------------------------------------------------

TEST(RouterAcquire, DelegatesToTheSelectedBackendAfterTheChecks) {
    auto backend = capable();
    SandboxRouter router({capable("other"), backend},
                         options([](auto& o) { o.selected = "capable"; }));
    auto sandbox = run_blocking(router.acquire(kKey, spec_of()));
    EXPECT_EQ(sandbox, backend->sandbox);
    ASSERT_EQ(backend->acquired.size(), 1U);
    EXPECT_EQ(backend->acquired[0].first, kKey);

    EXPECT_THROW(run_blocking(router.acquire(
                     kKey, spec_of([](auto& f) { f.egress = Egress::unrestricted; }))),
                 SandboxEgressNotEnforced);
    EXPECT_EQ(backend->acquired.size(), 1U);
}

TEST(RouterAcquire, AKeyWithNoBoundConversationIsRefused) {
    auto backend = capable();
    SandboxRouter router({backend});
    const auto message = refusal_of([&] {
        run_blocking(router.acquire(SandboxKey{"tenant", "", "agent", ""}, spec_of()));
    });
    EXPECT_TRUE(message.starts_with("InvalidArgument")) << message;
    EXPECT_NE(message.find("thread_id"), std::string::npos) << message;
    EXPECT_TRUE(backend->acquired.empty());
}

TEST(RouterAcquire, CallScopeIsRaisedToTheHostsAndNeedsACallId) {
    auto backend = capable();
    backend->declarations_.isolation_scopes = {IsolationScope::conversation, IsolationScope::call};
    SandboxRouter router({backend},
                         options([](auto& o) { o.min_isolation_scope = IsolationScope::call; }));

    EXPECT_THROW(run_blocking(router.acquire(kKey, spec_of())), InvalidArgument);
    EXPECT_TRUE(backend->acquired.empty());

    const SandboxKey call_key{"tenant", "thread-1", "agent", "call-7"};
    run_blocking(router.acquire(call_key, spec_of()));
    ASSERT_EQ(backend->acquired.size(), 1U);
    EXPECT_EQ(backend->acquired[0].second->isolation_scope, IsolationScope::call);
}

// --- Disposal ------------------------------------------------------------------------------------

TEST(RouterDispose, FansOutToEveryBackendAndSurvivesAThrowingOne) {
    auto first = capable("first");
    first->dispose_failure = DisposalFailure{DisposalCode::refused, "first refused"};
    auto throwing = capable("throwing", Isolation::none);
    throwing->dispose_throws = true;
    auto last = capable("last");
    last->dispose_failure = DisposalFailure{DisposalCode::timeout, "last timed out"};
    SandboxRouter router({first, throwing, last});

    const auto failure = run_blocking(router.dispose(kKey, "shell"));
    EXPECT_EQ(first->disposed.size(), 1U);
    EXPECT_EQ(throwing->disposed.size(), 1U);
    ASSERT_EQ(last->disposed.size(), 1U);
    EXPECT_EQ(last->disposed[0].first, kKey);
    EXPECT_EQ(last->disposed[0].second, "shell");
    ASSERT_TRUE(failure.has_value());
    // timeout outranks refused and the exception's unknown.
    EXPECT_EQ(failure->code, DisposalCode::timeout);
}

TEST(RouterDispose, AThrowingBackendAloneFoldsToUnknown) {
    auto throwing = capable("throwing");
    throwing->dispose_throws = true;
    SandboxRouter router({throwing});
    const auto failure = run_blocking(router.dispose(kKey));
    ASSERT_TRUE(failure.has_value());
    EXPECT_EQ(failure->code, DisposalCode::unknown);
    EXPECT_NE(failure->detail.find("throwing"), std::string::npos);
    EXPECT_FALSE(throwing->disposed[0].second.has_value());
}

TEST(RouterDispose, NothingFailedIsNullopt) {
    SandboxRouter router({capable("a"), capable("b")});
    EXPECT_FALSE(run_blocking(router.dispose(kKey, "shell")).has_value());
}

TEST(RouterDispose, CancellationPropagatesInsteadOfBeingSwallowed) {
    auto hanging = capable("hanging");
    hanging->dispose_hangs = true;
    auto after = capable("after");
    SandboxRouter router({hanging, after});
    auto raced = [&]() -> Task<std::size_t> {
        using namespace boost::asio::experimental::awaitable_operators;
        boost::asio::steady_timer deadline(co_await boost::asio::this_coro::executor, 20ms);
        auto outcome =
            co_await (router.dispose(kKey) || deadline.async_wait(boost::asio::use_awaitable));
        co_return outcome.index();
    };
    EXPECT_EQ(run_blocking(raced()), 1U);
    // A swallowed cancellation would have gone on to the next backend.
    EXPECT_EQ(hanging->disposed.size(), 1U);
    EXPECT_TRUE(after->disposed.empty());
}

TEST(RouterDisposeScope, SumsDisposedAndFoldsUndisposedAcrossEveryBackend) {
    auto first = capable("first");
    first->purge = ScopePurge{2, std::nullopt};
    auto throwing = capable("throwing");
    throwing->dispose_throws = true;
    auto last = capable("last");
    last->purge = ScopePurge{3, DisposalFailure{DisposalCode::unreachable, "gone"}};
    SandboxRouter router({first, throwing, last});

    const auto purge = run_blocking(router.dispose_scope("tenant", "thread-1"));
    EXPECT_EQ(purge.disposed, 5);
    ASSERT_TRUE(purge.undisposed.has_value());
    EXPECT_EQ(purge.undisposed->code, DisposalCode::unreachable);
    for (const auto& backend : {first, throwing, last}) {
        ASSERT_EQ(backend->purged.size(), 1U) << backend->name();
        EXPECT_EQ(backend->purged[0], (std::pair<std::string, std::string>{"tenant", "thread-1"}));
    }
}

TEST(RouterDisposeKind, ReportsTrueWhenDisposalCompletesCleanly) {
    auto backend = capable();
    SandboxRouter router({backend});
    EXPECT_TRUE(run_blocking(router.dispose_kind(kKey, "shell", 5s)));
    ASSERT_EQ(backend->disposed.size(), 1U);
    EXPECT_EQ(backend->disposed[0].second, "shell");
}

TEST(RouterDisposeKind, ReportsFalseWhenABackendReportsAFailure) {
    auto backend = capable();
    backend->dispose_failure = DisposalFailure{DisposalCode::refused, "no"};
    SandboxRouter router({backend});
    EXPECT_FALSE(run_blocking(router.dispose_kind(kKey, "shell", 5s)));
}

TEST(RouterDisposeKind, ReportsFalseWhenTheTimeoutExpires) {
    auto backend = capable();
    backend->dispose_hangs = true;
    SandboxRouter router({backend});
    const auto started = std::chrono::steady_clock::now();
    EXPECT_FALSE(run_blocking(router.dispose_kind(kKey, "shell", 50ms)));
    EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
    EXPECT_EQ(backend->disposed.size(), 1U);
}

// --- Per-call cleanup ----------------------------------------------------------------------------

TEST(RouterCleanupCall, ReclaimsTheCallPathWhenTheBackendDeclaresReclaim) {
    auto backend = capable();
    backend->declarations_.capabilities.insert(Capability::reclaim);
    SandboxRouter router({backend});

    auto reason = run_blocking(
        router.cleanup_call(backend->sandbox, kKey, spec_of(), "/base/0123456789ab", 5s));
    EXPECT_FALSE(reason.has_value()) << *reason;
    ASSERT_EQ(backend->sandbox->reclaimed.size(), 1U);
    // An unset work_dir reads as the sandbox's base.
    EXPECT_EQ(backend->sandbox->reclaimed[0],
              (std::pair<std::string, std::string>{"/base/0123456789ab", "/base"}));
    EXPECT_TRUE(backend->disposed.empty());

    run_blocking(router.cleanup_call(backend->sandbox, kKey,
                                     spec_of([](auto& f) { f.work_dir = "/w"; }), "/w/abc", 5s));
    EXPECT_EQ(backend->sandbox->reclaimed[1].second, "/w");
}

TEST(RouterCleanupCall, AFailedReclaimIsAReasonNotAnException) {
    auto backend = capable();
    backend->declarations_.capabilities.insert(Capability::reclaim);
    backend->sandbox->fail_reclaim = true;
    SandboxRouter router({backend});
    const auto reason =
        run_blocking(router.cleanup_call(backend->sandbox, kKey, spec_of(), "/base/x", 5s));
    ASSERT_TRUE(reason.has_value());
    EXPECT_NE(reason->find("the removal call failed"), std::string::npos) << *reason;
}

TEST(RouterCleanupCall, DisposesTheKindWhenTheBackendWithholdsReclaim) {
    auto backend = capable();
    SandboxRouter router({backend});
    const auto reason = run_blocking(
        router.cleanup_call(backend->sandbox, kKey, spec_of(), "/maf-sandbox/work/abc", 5s));
    EXPECT_FALSE(reason.has_value()) << *reason;
    EXPECT_TRUE(backend->sandbox->reclaimed.empty());
    ASSERT_EQ(backend->disposed.size(), 1U);
    EXPECT_EQ(backend->disposed[0].first, kKey);
    EXPECT_EQ(backend->disposed[0].second, "shell");
}

TEST(RouterCleanupCall, AFailedDisposalInsteadOfReclaimIsAReason) {
    auto backend = capable();
    backend->dispose_throws = true;
    SandboxRouter router({backend});
    const auto reason =
        run_blocking(router.cleanup_call(backend->sandbox, kKey, spec_of(), "/x/y", 5s));
    ASSERT_TRUE(reason.has_value());
    EXPECT_NE(reason->find("disposal of kind 'shell' failed"), std::string::npos) << *reason;
    // Provider text stays in the log, out of the reason.
    EXPECT_EQ(reason->find("secret.example"), std::string::npos) << *reason;
}

}  // namespace
}  // namespace maf_sandbox
