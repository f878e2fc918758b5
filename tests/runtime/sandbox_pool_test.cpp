// LocalBackend's pool of pre-built sandboxes: a create takes one (relabelled for its key), the pool
// refills itself, a warm pooled sandbox serves exec like any other, and the backend removes what
// it pooled when it goes away.
#include <gtest/gtest.h>

#include <filesystem>

#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "sandbox_fixture.hpp"

namespace maf_sandbox::local {
namespace {

using runtime::testing::StateDir;

SandboxSpec call_spec() {
    SandboxSpecFields fields;
    fields.kind = "shell";
    fields.isolation_scope = IsolationScope::call;
    return SandboxSpec(fields);
}

std::size_t sandbox_dirs(const StateDir& state) {
    std::size_t count = 0;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(state.path() / "sandboxes", ec), end;
         !ec && it != end; it.increment(ec)) {
        ++count;
    }
    return count;
}

TEST(SandboxPool, CreateTakesAPrebuiltSandboxRelabelledAndTheBackendRemovesWhatItPooled) {
    StateDir state;
    {
        LocalBackendConfig config;
        config.state_dir = state.path();
        config.pool_size = 1;
        LocalBackend backend(config);
        struct Cleanup {  // on failure too: the pool itself is drained by ~LocalBackend
            LocalBackend& backend;
            ~Cleanup() { run_blocking(backend.dispose_scope("pool", "t")); }
        } cleanup{backend};
        const SandboxKey first_key{"pool", "t", "agent", "call-1"};
        run_blocking(
            backend.acquire(first_key, call_spec()));  // empty pool: created, refill starts
        backend.wait_for_pool();
        std::string pooled_id;
        for (const auto& info : backend.list({})) {
            if (info.labels.count("maf-pool") > 0) {
                pooled_id = info.id;
                EXPECT_EQ(info.labels.size(), 1u) << "a pooled sandbox carries no identity labels";
            }
        }
        ASSERT_FALSE(pooled_id.empty()) << "the pool was not refilled";

        const SandboxKey second_key{"pool", "t", "agent", "call-2"};
        auto taken = run_blocking(backend.acquire(second_key, call_spec()));
        bool relabelled = false;
        for (const auto& info : backend.list({"call=call-2"})) {
            relabelled = info.id == pooled_id && info.labels.at("scope") == "pool" &&
                         info.labels.count("maf-pool") == 0;
        }
        EXPECT_TRUE(relabelled) << "the second create did not take the pooled sandbox";
        ExecRequest request;
        request.command = std::string("echo pooled; id -u");
        const auto result = run_blocking(taken->exec(request));
        EXPECT_EQ(result.stdout_bytes, "pooled\n1000\n") << result.stderr_bytes;

        backend.wait_for_pool();  // the take started a refill
        EXPECT_FALSE(run_blocking(backend.dispose(first_key, std::nullopt)));
        EXPECT_FALSE(run_blocking(backend.dispose(second_key, std::nullopt)));
        EXPECT_EQ(backend.list({}).size(), 1u) << "only the refilled pooled sandbox is left";
    }
    // The backend destroyed the pooled sandbox nobody took.
    EXPECT_EQ(sandbox_dirs(state), 0u);
}

}  // namespace
}  // namespace maf_sandbox::local
