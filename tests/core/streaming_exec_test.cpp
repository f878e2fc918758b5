// The protocol's streaming exec: a capability the router can require, refused by a backend that
// does not declare it (never emulated by delivering everything at the end), and the timeout
// error that keeps what was printed.
#include <gtest/gtest.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/in_process.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/core/vocabulary.hpp"

namespace maf_sandbox {
namespace {

SandboxSpec spec_requiring(std::set<Capability> capabilities) {
    SandboxSpecFields fields;
    fields.kind = "shell";
    fields.requires_capabilities = std::move(capabilities);
    return SandboxSpec(fields);
}

TEST(StreamingExec, TheCapabilityHasOneSpelling) {
    EXPECT_EQ(to_string(Capability::streaming_exec), "streaming_exec");
    EXPECT_EQ(parse_capability("streaming_exec"), Capability::streaming_exec);
}

TEST(StreamingExec, TheRouterRefusesASpecNeedingItFromABackendWithoutIt) {
    InProcessBackendOptions options;
    options.declarations.capabilities.insert(Capability::exec);
    auto backend = std::make_shared<InProcessSandboxBackend>(nullptr, options);
    SandboxRouterOptions router_options;
    router_options.min_isolation = Isolation::none;
    SandboxRouter router({backend}, router_options);
    EXPECT_NO_THROW(router.ensure_can_serve(spec_requiring({Capability::exec})));
    EXPECT_THROW(
        router.ensure_can_serve(spec_requiring({Capability::exec, Capability::streaming_exec})),
        SandboxCapabilityNotSupported);

    options.declarations.capabilities.insert(Capability::streaming_exec);
    SandboxRouter streaming({std::make_shared<InProcessSandboxBackend>(nullptr, options)},
                            router_options);
    EXPECT_NO_THROW(
        streaming.ensure_can_serve(spec_requiring({Capability::exec, Capability::streaming_exec})));
}

TEST(StreamingExec, ASandboxThatDoesNotStreamRefusesBeforeRunningAnything) {
    InProcessSandbox sandbox;
    ExecRequest request;
    request.command = std::string("echo hi");
    bool delivered = false;
    const ExecSink sink = [&delivered](ExecChunk) -> Task<void> {
        delivered = true;
        co_return;
    };
    EXPECT_THROW(run_blocking(sandbox.exec_stream(request, sink)), NotImplemented);
    EXPECT_FALSE(delivered);
    EXPECT_TRUE(sandbox.commands().empty());
}

TEST(StreamingExec, TheExecTimeoutIsATimeoutCarryingTheHeads) {
    try {
        throw SandboxExecTimeout("ran past 2 s", "y\ny\n", "warn\n");
    } catch (const Timeout& e) {
        EXPECT_EQ(e.type_name(), "SandboxExecTimeout");
        const auto& exec_timeout = dynamic_cast<const SandboxExecTimeout&>(e);
        EXPECT_EQ(exec_timeout.stdout_head(), "y\ny\n");
        EXPECT_EQ(exec_timeout.stderr_head(), "warn\n");
    }
}

}  // namespace
}  // namespace maf_sandbox
