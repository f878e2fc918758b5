#include "demo_backends.hpp"

#include <boost/asio/this_coro.hpp>

#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/acas/client.hpp"
#include "maf_sandbox/azure/credentials.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/local/local_backend.hpp"

namespace maf_sandbox::demo {

namespace {

DemoBackend local_backend(const DemoBackendOptions& options, const std::string& scope,
                          const std::string& thread) {
    local::LocalBackendConfig config;
    if (!options.state_dir.empty()) {
        config.state_dir = options.state_dir;
    }
    auto backend = std::make_shared<local::LocalBackend>(config);
    const auto selector = scope_selector(scope, thread);
    std::vector<std::string> items;
    for (const auto& [key, value] : selector) {
        items.push_back(key + "=" + value);
    }
    auto count = [backend, items]() -> Task<std::size_t> { co_return backend->list(items).size(); };
    return {backend, count};
}

acas::AcasSandboxConfig acas_config(const DemoBackendOptions& options) {
    if (options.endpoint.empty()) {
        throw InvalidArgument("--backend acas needs --endpoint (the acas-emulator's https URL)");
    }
    acas::AcasSandboxConfig config;
    config.endpoint = options.endpoint;
    config.subscription_id = "demo-subscription";
    config.resource_group = "demo-rg";
    config.sandbox_group = "demo-group";
    config.registry = "demo.local";
    if (!options.ca_file.empty()) {
        config.ca_file = options.ca_file;
    }
    config.token = options.token;
    config.emulator = true;
    config.poll_interval = Seconds(0.2);
    config.silence_preview_warning = true;
    return config;
}

}  // namespace

Task<DemoBackend> make_demo_backend(const DemoBackendOptions& options, const std::string& scope,
                                    const std::string& thread) {
    if (options.backend == "local") {
        co_return local_backend(options, scope, thread);
    }
    if (options.backend != "acas") {
        throw InvalidArgument("unknown --backend '" + options.backend + "'; use acas or local");
    }
    const auto config = acas_config(options);
    auto backend = std::make_shared<acas::AcasBackend>(config);
    co_await backend->discover();

    // A separate client lists by label from the service: the proof that disposal reached it.
    acas::AcasClientOptions client_options;
    client_options.endpoint = config.endpoint;
    client_options.subscription_id = config.subscription_id;
    client_options.resource_group = config.resource_group;
    client_options.sandbox_group = config.sandbox_group;
    client_options.ca_file = config.ca_file;
    client_options.credential = azure::make_static_token_credential(options.token);
    client_options.emulator = true;
    auto client = std::make_shared<acas::AcasClient>(co_await boost::asio::this_coro::executor,
                                                     client_options);
    const auto selector = scope_selector(scope, thread);
    auto count = [client, selector]() -> Task<std::size_t> {
        const auto found =
            co_await client->list_sandboxes(selector, acas::deadline_after(Seconds(30)));
        co_return found.size();
    };
    co_return DemoBackend{backend, count};
}

}  // namespace maf_sandbox::demo
