// LocalBackend over the real runtime: warm reuse by key, per-call creation, disposal by scope,
// native files, and the core conformance suites it declares.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "maf_sandbox/core/conformance.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/local/warm_lookup.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "sandbox_fixture.hpp"

namespace maf_sandbox::local {
namespace {

using runtime::testing::StateDir;

SandboxSpec spec_for(IsolationScope scope = IsolationScope::conversation) {
    SandboxSpecFields fields;
    fields.kind = "shell";
    fields.isolation_scope = scope;
    return SandboxSpec(fields);
}

LocalBackendConfig config_for(const StateDir& state) {
    LocalBackendConfig config;
    config.state_dir = state.path();
    config.memory_bytes = 512ull << 20;
    return config;
}

TEST(LocalBackend, AcquireReusesByKeyAndDisposeScopeRemovesEverything) {
    StateDir state;
    LocalBackend backend(config_for(state));
    const SandboxKey key{"scope-a", "thread-1", "agent", ""};
    auto first = run_blocking(backend.acquire(key, spec_for()));
    auto second = run_blocking(backend.acquire(key, spec_for()));
    ExecRequest request;
    request.command =
        std::string("echo $PWD; id -u; echo warm > marker; touch w && ls -ld . | cut -c1-4");
    const auto a = run_blocking(first->exec(request));
    EXPECT_EQ(a.stdout_bytes, "/maf-sandbox/work\n1000\ndrwx\n") << a.stderr_bytes;
    request.command = std::vector<std::string>{"cat", "marker"};
    EXPECT_EQ(run_blocking(second->exec(request)).stdout_bytes, "warm\n");
    EXPECT_EQ(backend.list({}).size(), 1u);

    const SandboxKey other{"scope-a", "thread-2", "agent", ""};
    run_blocking(backend.acquire(other, spec_for()));
    EXPECT_EQ(backend.list({}).size(), 2u);

    const auto purge = run_blocking(backend.dispose_scope("scope-a", "thread-1"));
    EXPECT_EQ(purge.disposed, 1);
    EXPECT_FALSE(purge.undisposed);
    EXPECT_EQ(backend.list({}).size(), 1u);
    EXPECT_FALSE(run_blocking(backend.dispose(other, std::nullopt)));
    EXPECT_TRUE(backend.list({}).empty());
    EXPECT_THROW(run_blocking(first->exec(request)), SandboxOutputUnreachable);
}

TEST(LocalBackend, EveryAcquireAtCallScopeCreates) {
    StateDir state;
    LocalBackend backend(config_for(state));
    const SandboxKey key{"s", "t", "a", "call-1"};
    run_blocking(backend.acquire(key, spec_for(IsolationScope::call)));
    run_blocking(backend.acquire(key, spec_for(IsolationScope::call)));
    EXPECT_EQ(backend.list({}).size(), 2u);
    EXPECT_EQ(run_blocking(backend.dispose_scope("s", "t")).disposed, 2);
}

// The error an acquire ends in, as its type and message; empty when it succeeds.
std::string refusal_of(const std::function<void()>& acquire) {
    try {
        acquire();
    } catch (const Error& e) {
        return fmt::format("{}: {}", e.type_name(), e.what());
    }
    return {};
}

TEST(LocalBackend, ADirectAcquireNeedingAnUndeclaredCapabilityIsRefusedAsTheRouterRefusesIt) {
    StateDir state;
    auto backend = std::make_shared<LocalBackend>(config_for(state));
    SandboxRouterOptions options;
    options.min_isolation = Isolation::container;
    SandboxRouter router({backend}, options);
    SandboxSpecFields fields;
    fields.kind = "shell";
    fields.requires_capabilities = {Capability::exec, Capability::snapshot};
    const SandboxSpec spec(fields);
    const SandboxKey key{"s", "t", "a", ""};

    const auto routed = refusal_of([&] { run_blocking(router.acquire(key, spec)); });
    const auto direct = refusal_of([&] { run_blocking(backend->acquire(key, spec)); });
    EXPECT_TRUE(routed.starts_with("SandboxCapabilityNotSupported: ")) << routed;
    EXPECT_EQ(direct, routed);
    EXPECT_THROW(run_blocking(backend->acquire(key, spec)), SandboxCapabilityNotSupported);
    EXPECT_TRUE(backend->list({}).empty());
}

TEST(LocalBackend, FilesAreNativeOwnedByTheGuestAndOutputOverTheCapRaises) {
    StateDir state;
    LocalBackend backend(config_for(state));
    auto sandbox = run_blocking(backend.acquire({"s", "t", "a", ""}, spec_for()));
    run_blocking(sandbox->write_file("dir/a.txt", "hello", ""));
    ExecRequest request;
    request.command = std::string("stat -c '%u %s' dir/a.txt; ln -s /etc/passwd link");
    EXPECT_EQ(run_blocking(sandbox->exec(request)).stdout_bytes, "1000 5\n");
    EXPECT_EQ(run_blocking(sandbox->read_file("dir/a.txt", "", 100)), "hello");
    const auto link = run_blocking(sandbox->stat_file("link", ""));
    ASSERT_TRUE(link);
    EXPECT_EQ(link->kind, EntryKind::symlink);
    EXPECT_THROW(run_blocking(sandbox->read_file("link", "", 100)), FileError);
    EXPECT_THROW(run_blocking(sandbox->read_file("dir/a.txt", "", 2)), SandboxTransferCapExceeded);

    request.command = std::string("head -c 5000 /dev/zero");
    request.max_output_bytes = 1000;
    try {
        run_blocking(sandbox->exec(request));
        ADD_FAILURE() << "no output-limit error";
    } catch (const ExecOutputLimitExceeded& e) {
        EXPECT_EQ(e.stdout_head().size(), 1000u);
        EXPECT_EQ(e.total_bytes(), 5000u);
    }
    request.command = std::string("sleep 5");
    request.max_output_bytes.reset();
    request.timeout = Seconds(0.5);
    EXPECT_THROW(run_blocking(sandbox->exec(request)), Timeout);
    run_blocking(backend.dispose_scope("s", "t"));
}

TEST(LocalBackend, BadInputCreatesNothing) {
    StateDir state;
    LocalBackend backend(config_for(state));
    SandboxSpecFields fields;
    fields.kind = "shell";
    fields.image = "no-such-image:1";
    EXPECT_THROW(run_blocking(backend.acquire({"s", "t", "a", ""}, SandboxSpec(fields))),
                 InvalidArgument);
    EXPECT_TRUE(backend.list({}).empty());
    EXPECT_THROW(backend.list({"not a selector"}), InvalidArgument);
}

// The key's one recorded sandbox, and a wait (bounded) until its supervisor is gone.
runtime::SandboxRecord only_record(const StateDir& state) {
    const auto records = runtime::Registry(state.path()).list();
    EXPECT_EQ(records.size(), 1u);
    return records.empty() ? runtime::SandboxRecord{} : records.front();
}

bool dies_within(const runtime::SandboxRecord& record, std::chrono::seconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (record_alive(record)) {
        if (std::chrono::steady_clock::now() >= deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

TEST(LocalBackend, AKilledSupervisorIsReportedAsAReplacedSandboxOnTheNextAcquireOnce) {
    StateDir state;
    const SandboxKey key{"s", "t", "a", ""};
    std::string previous;
    {
        LocalBackend backend(config_for(state));
        auto first = run_blocking(backend.acquire(key, spec_for()));
        EXPECT_FALSE(first->replaced().has_value());
        run_blocking(first->write_file("marker", "state", ""));
        const auto record = only_record(state);
        previous = record.id;
        ASSERT_TRUE(kill_recorded(record));
        ASSERT_TRUE(dies_within(record, std::chrono::seconds(20)));
    }
    // Another backend object (another process would do the same): the registry on disk remembers.
    LocalBackend backend(config_for(state));
    auto second = run_blocking(backend.acquire(key, spec_for()));
    ASSERT_TRUE(second->replaced().has_value()) << "a blank sandbox was handed out silently";
    EXPECT_EQ(second->replaced()->previous_id, previous);
    EXPECT_NE(second->replaced()->reason.find("gone"), std::string::npos);
    EXPECT_THROW(run_blocking(second->read_file("marker", "", 100)), FileNotFound);
    auto third = run_blocking(backend.acquire(key, spec_for()));
    EXPECT_FALSE(third->replaced().has_value()) << "one loss is reported once";
    EXPECT_FALSE(run_blocking(backend.dispose(key, std::nullopt)));
}

TEST(LocalBackend, ASandboxThatReachedItsIdleTimeoutIsReplacedQuietly) {
    StateDir state;
    auto config = config_for(state);
    config.idle_timeout = std::chrono::seconds(1);  // disposal the spec asked for
    LocalBackend backend(config);
    const SandboxKey key{"s", "idle", "a", ""};
    run_blocking(backend.acquire(key, spec_for()));
    const auto record = only_record(state);
    ASSERT_TRUE(dies_within(record, std::chrono::seconds(30)));
    auto next = run_blocking(backend.acquire(key, spec_for()));
    EXPECT_FALSE(next->replaced().has_value()) << next->replaced()->reason;
    EXPECT_FALSE(run_blocking(backend.dispose(key, std::nullopt)));
}

TEST(LocalBackendConformance, FilesOutFilesInExecAndFilesDeleteSuitesPass) {
    StateDir state;
    LocalBackend backend(config_for(state));
    SandboxSpecFields fields;
    fields.kind = "conformance";
    fields.requires_capabilities = backend.declarations().capabilities;
    auto sandbox = run_blocking(backend.acquire({"conf", "t", "a", ""}, SandboxSpec(fields)));
    PosixGuestSubject subject(sandbox, sandbox->base_directory(),
                              backend.declarations().capabilities);
    for (auto* suite : {&assert_files_out_conformance, &assert_files_in_conformance,
                        &assert_exec_conformance, &assert_files_delete_conformance}) {
        const auto results = run_blocking(suite(subject));
        for (const auto& result : results) {
            EXPECT_NE(result.status, ProbeStatus::failed) << result.name << ": " << result.detail;
        }
    }
    run_blocking(backend.dispose_scope("conf", "t"));
}

}  // namespace
}  // namespace maf_sandbox::local
