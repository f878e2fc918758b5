// The key index behind a warm lookup: it finds a conversation's sandbox without reading every
// record, it is only ever a hint (a wrong entry falls back to a scan, which repairs it), and it
// goes with the sandbox.
#include <gtest/gtest.h>

#include <filesystem>

#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/local/warm_lookup.hpp"
#include "sandbox_fixture.hpp"

namespace maf_sandbox::local {
namespace {

namespace fs = std::filesystem;
using runtime::testing::StateDir;

SandboxSpec spec_at(IsolationScope scope) {
    SandboxSpecFields fields;
    fields.kind = "shell";
    fields.isolation_scope = scope;
    return SandboxSpec(fields);
}

std::vector<fs::path> index_entries(const StateDir& state) {
    std::vector<fs::path> entries;
    std::error_code ec;
    for (fs::directory_iterator it(state.path() / "keys", ec), end; !ec && it != end;
         it.increment(ec)) {
        entries.push_back(it->path());
    }
    return entries;
}

TEST(WarmLookup, TheKeyIndexFindsTheSandboxIsRepairedWhenWrongAndGoesWithTheSandbox) {
    StateDir state;
    LocalBackendConfig config;
    config.state_dir = state.path();
    LocalBackend backend(config);
    runtime::Registry registry(state.path());
    const SandboxKey key{"scope-i", "thread-i", "agent-i", ""};
    const auto spec = spec_at(IsolationScope::conversation);
    const auto labels = sandbox_labels(key, spec);

    run_blocking(backend.acquire(key, spec));
    const auto records = registry.list();
    ASSERT_EQ(records.size(), 1u);
    const auto id = records.front().id;
    auto entries = index_entries(state);
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(fs::read_symlink(entries.front()).string(), id);
    ASSERT_TRUE(find_live(registry, labels));
    EXPECT_EQ(find_live(registry, labels)->id, id);

    // A wrong entry (a sandbox that does not exist) is only a hint: the scan finds the right one
    // and the entry names it again.
    fs::remove(entries.front());
    fs::create_symlink(std::string(32, 'a'), entries.front());
    ASSERT_TRUE(find_live(registry, labels));
    EXPECT_EQ(find_live(registry, labels)->id, id);
    EXPECT_EQ(fs::read_symlink(entries.front()).string(), id);

    // Another key is not found through it.
    const SandboxKey other{"scope-i", "thread-other", "agent-i", ""};
    EXPECT_FALSE(find_live(registry, sandbox_labels(other, spec)));

    EXPECT_EQ(run_blocking(backend.dispose_scope("scope-i", "thread-i")).disposed, 1);
    EXPECT_TRUE(index_entries(state).empty());
    EXPECT_FALSE(find_live(registry, labels));
}

TEST(WarmLookup, CallScopedSandboxesAreNeverIndexed) {
    StateDir state;
    LocalBackendConfig config;
    config.state_dir = state.path();
    LocalBackend backend(config);
    run_blocking(backend.acquire({"scope-c", "thread-c", "agent-c", "call-1"},
                                 spec_at(IsolationScope::call)));
    EXPECT_TRUE(index_entries(state).empty());
    run_blocking(backend.dispose_scope("scope-c", "thread-c"));
}

}  // namespace
}  // namespace maf_sandbox::local
