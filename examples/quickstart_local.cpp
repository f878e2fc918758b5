// The C++ counterpart of the seed README's Quickstart, on the local backend: a backend, a router
// whose floor the host lowers to container on purpose, and one command in a sandbox.
#include <iostream>
#include <memory>

#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"

int main() {
    namespace ms = maf_sandbox;
    auto backend = std::make_shared<ms::local::LocalBackend>();  // isolation: container
    ms::SandboxRouterOptions options;
    options.min_isolation = ms::Isolation::container;  // the default floor, microvm, refuses it
    ms::SandboxRouter router({backend}, options);

    ms::SandboxSpecFields fields;
    fields.kind = "quickstart";  // egress defaults to closed: no network at all
    const ms::SandboxKey key{"my-app", "conversation-1", "agent-a", ""};

    return ms::run_blocking([&]() -> ms::Task<int> {
        auto sandbox = co_await router.acquire(key, ms::SandboxSpec(fields));
        ms::ExecRequest request;
        request.command = ms::Argv{"python3", "-c", "print('hello from the sandbox')"};
        const auto result = co_await sandbox->exec(request);
        std::cout << result.stdout_text();
        co_await router.dispose_scope(key.scope, key.thread_id);  // conversation over
        co_return result.exit_code;
    }());
}
