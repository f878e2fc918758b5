// The seed README's Quickstart in C++: AcasSandboxConfig, AcasBackend and a SandboxRouter, then one
// command. Pointed at an acas-emulator here (argv: endpoint, CA file, token); against the real
// service, drop ca_file and token (DefaultAzureCredential resolves the identity) and the router's
// default microvm floor admits the backend as it is.
#include <iostream>
#include <memory>

#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

int main(int argc, char** argv) {
    namespace ms = maf_sandbox;
    if (argc != 4) {
        std::cerr << "usage: quickstart_acas ENDPOINT CA_FILE TOKEN\n";
        return 2;
    }
    ms::acas::AcasSandboxConfig config;
    config.endpoint = argv[1];  // https://management.<region>.azuredevcompute.io for the service
    config.subscription_id = "00000000-0000-0000-0000-000000000000";
    config.resource_group = "my-rg";
    config.sandbox_group = "my-sandbox-group";
    config.registry = "myregistry.azurecr.io";
    config.ca_file = argv[2];
    config.token = argv[3];
    auto backend = std::make_shared<ms::acas::AcasBackend>(config);

    return ms::run_blocking([&]() -> ms::Task<int> {
        co_await backend->discover();  // an emulator names its real rung; the floor stays honest
        ms::SandboxRouterOptions options;
        options.min_isolation = backend->isolation();
        ms::SandboxRouter router({backend}, options);
        ms::SandboxSpecFields fields;
        fields.kind = "quickstart";
        fields.image = "host";  // the emulator's image; a catalogue name such as python-3.13 live
        const ms::SandboxKey key{"my-app", "conversation-1", "agent-a", ""};
        auto sandbox = co_await router.acquire(key, ms::SandboxSpec(fields));
        ms::ExecRequest request;
        request.command = ms::Argv{"sh", "-c", "echo hello from $(hostname)"};
        const auto result = co_await sandbox->exec(request);
        std::cout << result.stdout_text();
        co_await router.dispose_scope(key.scope, key.thread_id);
        // Its HTTPS connections live on this coroutine's io_context: close before it ends.
        co_await backend->close();
        co_return result.exit_code;
    }());
}
