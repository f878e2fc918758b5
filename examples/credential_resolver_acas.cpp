// A host wiring the README's host-selected credential resolver (AcasSandboxConfig::
// credential_resolver): acquires run under a per-conversation request grant, disposal under a
// cleanup grant any replica can recover, a rotation is a new generation, and a conversation the
// host will not vouch for fails with AcasCredentialError instead of falling back to the default
// identity. Pointed at an acas-emulator here (argv: endpoint, CA file, token), where every grant
// is the emulator's one static token; a real host returns credentials from its token exchange
// (e.g. an on-behalf-of credential for the request grant, a managed identity for cleanup).
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/azure/credentials.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace ms = maf_sandbox;

namespace {

// The host's grant policy. Trusted conversations come from the host's own request context, never
// from the model; `generation` changes when the host rotates a grant.
class HostGrants {
  public:
    explicit HostGrants(std::string token) : token_(std::move(token)) {}

    void rotate() {
        std::lock_guard lock(mutex_);
        ++generation_;
    }
    void print_log() {
        std::lock_guard lock(mutex_);
        for (const auto& [line, count] : asked_)
            std::cout << "  resolver asked: " << line << " (x" << count << ")\n";
    }

    ms::Task<ms::acas::AcasCredentialBinding> resolve(ms::acas::AcasCredentialRequest request) {
        ms::acas::AcasCredentialBinding binding;
        {
            std::lock_guard lock(mutex_);
            const char* operation =
                request.operation == ms::acas::AcasOperation::acquire   ? "acquire"
                : request.operation == ms::acas::AcasOperation::dispose ? "dispose"
                                                                        : "dispose_scope";
            ++asked_[std::string(operation) + " scope=" + request.scope +
                     " thread=" + request.thread_id];
            if (request.scope == "untrusted-app") {
                // The host cannot vouch for this caller: fail, and the backend must not fall back.
                throw std::runtime_error("no grant for this conversation");
            }
            if (request.operation == ms::acas::AcasOperation::acquire && !request.scope.empty()) {
                binding.authority = "request-grant/" + request.scope;
                binding.generation = std::to_string(generation_);
            } else {
                // Cleanup (and the backend's discovery) run as a principal every replica holds.
                binding.authority = "cleanup-principal";
                binding.generation = "1";
            }
        }
        // A fresh credential per binding and io_context; the backend owns and closes it.
        binding.create_credential = [token = token_](boost::asio::any_io_executor) {
            return ms::azure::make_static_token_credential(token);
        };
        co_return binding;
    }

  private:
    std::mutex mutex_;
    std::string token_;
    int generation_ = 1;
    std::map<std::string, int> asked_;
};

ms::Task<int> run(std::shared_ptr<ms::acas::AcasBackend> backend, HostGrants& grants) {
    co_await backend->discover();
    ms::SandboxRouterOptions options;
    options.min_isolation = backend->isolation();  // an emulator names its real rung
    ms::SandboxRouter router({backend}, options);
    ms::SandboxSpecFields fields;
    fields.kind = "resolver-example";
    fields.image = "host";
    fields.requires_capabilities = {ms::Capability::exec};
    const ms::SandboxSpec spec(fields);

    // 1. Acquire under the request grant; the sandbox keeps that grant for its operations.
    const ms::SandboxKey key{"my-app", "conversation-1", "agent-a", ""};
    auto sandbox = co_await router.acquire(key, spec);
    ms::ExecRequest request;
    request.command = ms::Argv{"sh", "-c", "echo acquired under the request grant"};
    const auto first_result = co_await sandbox->exec(request);
    std::cout << first_result.stdout_text();
    std::cout << "clients open: " << backend->open_clients() << "\n";

    // 2. Rotation: a new generation isolates authentication state (a client of its own), while
    //    the sandbox acquired before it keeps its captured grant.
    grants.rotate();
    const ms::SandboxKey second{"my-app", "conversation-1", "agent-b", ""};
    co_await router.acquire(second, spec);
    std::cout << "after rotation, clients open: " << backend->open_clients() << "\n";
    request.command = ms::Argv{"sh", "-c", "echo still served under the captured grant"};
    const auto kept_result = co_await sandbox->exec(request);
    std::cout << kept_result.stdout_text();

    // 3. No fallback: a refused grant is an AcasCredentialError, never the default identity.
    int status = 1;
    try {
        const ms::SandboxKey untrusted{"untrusted-app", "conversation-9", "agent-a", ""};
        co_await backend->acquire(untrusted, spec);
    } catch (const ms::acas::AcasCredentialError& e) {
        std::cout << "no fallback: " << e.what() << "\n";
        status = 0;
    }

    // 4. Cleanup under the cleanup grant, found by label from the service.
    const auto purge = co_await router.dispose_scope(key.scope, key.thread_id);
    std::cout << "cleanup grant disposed " << purge.disposed << " sandbox(es)\n";
    if (purge.undisposed || purge.disposed != 2)
        status = 1;
    co_await backend->close();
    co_return status;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::cerr << "usage: credential_resolver_acas ENDPOINT CA_FILE TOKEN\n";
        return 2;
    }
    HostGrants grants(argv[3]);
    ms::acas::AcasSandboxConfig config;
    config.endpoint = argv[1];
    config.subscription_id = "00000000-0000-0000-0000-000000000000";
    config.resource_group = "my-rg";
    config.sandbox_group = "my-sandbox-group";
    config.ca_file = argv[2];
    config.silence_preview_warning = true;
    config.poll_interval = ms::Seconds{0.2};  // a local emulator; the service's default is 3 s
    config.credential_resolver = [&grants](ms::acas::AcasCredentialRequest request) {
        return grants.resolve(std::move(request));
    };
    auto backend = std::make_shared<ms::acas::AcasBackend>(config);
    const int status = ms::run_blocking(run(backend, grants));
    grants.print_log();
    std::cout << (status == 0 ? "resolver example: ok\n" : "resolver example: FAILED\n");
    return status;
}
