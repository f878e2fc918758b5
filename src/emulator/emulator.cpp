// The Emulator: a SandboxService behind an HTTP face. start() builds the handler chain
//   metrics(faults(refusals(router)))
// (request_metrics.hpp, fault_injector.hpp, wire_format.hpp, router.hpp), serves it over TLS or
// plain HTTP, and starts the service's sweep.
#include "maf_sandbox/emulator/emulator.hpp"

#include <spdlog/spdlog.h>

#include <fmt/format.h>
#include <atomic>
#include <filesystem>

#include "entra_token.hpp"
#include "fault_injector.hpp"
#include "http_face.hpp"
#include "maf_sandbox/net/http_server.hpp"
#include "maf_sandbox/net/tls.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/kernel/state_dir.hpp"
#include "registry_standin.hpp"
#include "request_metrics.hpp"
#include "router.hpp"
#include "routing.hpp"
#include "sandbox_service.hpp"
#include "state_store.hpp"
#include "wire_format.hpp"
#include "write_admission.hpp"

namespace maf_sandbox::emulator {
using net::HttpRequest;
using net::HttpResponse;

struct Emulator::Impl {
    Impl(boost::asio::any_io_executor ex, EmulatorOptions opts, std::shared_ptr<spdlog::logger> log)
        : executor(std::move(ex)),
          options(std::move(opts)),
          logger(std::move(log)),
          faults(std::make_shared<FaultInjector>(options.faults)),
          metrics(std::make_shared<RequestMetrics>()) {
        ServiceOptions service_options;
        service_options.state_dir = options.state_dir;
        service_options.aliases = options.aliases;
        service_options.deleting_retention = options.deleting_retention;
        service_options.worker_threads = options.worker_threads;
        service_options.file_limits = options.file_limits;
        service_options.create_delay_ms = [faults = faults] { return faults->create_delay_ms(); };
        service = std::make_shared<SandboxService>(
            executor, std::move(service_options), logger,
            make_runtime_engine(options.state_dir / "runtime", options.image_limits));
        identity =
            fmt::format("{}; isolation={}", kEmulatorVersion, to_string(service->isolation()));
        RouterOptions router_options;
        router_options.token = options.token;
        router_options.public_metrics = options.public_metrics;
        router_options.identity = identity;
        if (options.impersonation) {
            router_options.entra_tokens =
                std::make_shared<const EntraTokenCheck>(*options.impersonation);
            identity.clear();  // no x-acas-emulator header: a client must take this for Azure
        }
        router_options.links.host = options.host;
        router_options.links.default_page_size = options.default_page_size;
        router =
            std::make_shared<Router>(std::move(router_options), service, faults, metrics, logger);
    }

    // The handler chain; each wrapper does one job around the next.
    Handler handler() {
        auto inner = [router = router](const Exchange& exchange) -> Task<HttpResponse> {
            co_return co_await router->handle(exchange);
        };
        return with_metrics(with_faults(with_refusals(inner, logger), faults, executor), metrics,
                            logger, identity);
    }

    net::HttpServerOptions server_options() {
        net::HttpServerOptions server_options;
        server_options.host = options.host;
        server_options.port = options.port;
        server_options.admit_body = file_write_admission(options.token, service->file_budget());
        if (options.plain_http) {
            scheme = "http";
            return server_options;
        }
        if (options.tls_cert && options.tls_key) {
            server_options.tls = net::load_pem_files(*options.tls_cert, *options.tls_key);
            return server_options;
        }
        // Kept across restarts, so clients that trust ca.pem keep working.
        const auto tls_dir = options.state_dir / "tls";
        // Refused when another user controls it (a planted link would take the key).
        (void)runtime::open_trusted_state_dir(tls_dir, 0700, kEmulatorStateAdvice);
        const auto cert = tls_dir / "server.pem";
        const auto key = tls_dir / "server-key.pem";
        if (std::filesystem::exists(cert) && std::filesystem::exists(key) &&
            std::filesystem::exists(options.state_dir / "ca.pem")) {
            server_options.tls = net::load_pem_files(cert, key);
        } else {
            auto authority = net::generate_self_signed({"localhost"}, {"127.0.0.1"});
            net::write_file_atomically(key, authority.server.private_key_pem, 0600);
            net::write_file_atomically(cert, authority.server.certificate_chain_pem, 0644);
            net::write_file_atomically(options.state_dir / "ca.pem", authority.ca_certificate_pem,
                                       0644);
            server_options.tls = std::move(authority.server);
        }
        return server_options;
    }

    boost::asio::any_io_executor executor;
    EmulatorOptions options;
    std::shared_ptr<spdlog::logger> logger;
    std::shared_ptr<FaultInjector> faults;
    std::shared_ptr<RequestMetrics> metrics;
    std::shared_ptr<SandboxService> service;
    std::shared_ptr<Router> router;
    std::string identity;
    std::unique_ptr<net::HttpServer> server;
    std::string scheme = "https";
    std::uint16_t port = 0;
    std::atomic<std::uint64_t> request_counter{0};
};

Emulator::Emulator(boost::asio::any_io_executor executor, EmulatorOptions options,
                   std::shared_ptr<spdlog::logger> logger)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options), std::move(logger))) {}

Emulator::~Emulator() {
    impl_->service->stop();
}

std::uint16_t Emulator::start() {
    auto& impl = *impl_;
    const auto server_options = impl.server_options();
    impl.service->start();
    std::weak_ptr<Impl> weak = impl_;
    impl.server = std::make_unique<net::HttpServer>(
        impl.executor, server_options,
        [weak, handler = impl.handler()](HttpRequest request) -> Task<HttpResponse> {
            auto self = weak.lock();
            if (!self) {
                co_return HttpResponse{503, {}, "shutting down\n", {}};
            }
            Exchange exchange;
            exchange.request_id = request.headers.get("x-ms-client-request-id")
                                      .value_or(fmt::format("emu-{}", ++self->request_counter));
            // Logs and metrics name the route from routing.hpp's fixed table, never request text.
            exchange.route = route_request(request.method, request.target);
            exchange.request = std::move(request);
            co_return co_await handler(exchange);
        });
    impl.port = impl.server->start();
    impl.router->listening(impl.scheme, impl.port);
    impl.logger->info("acas-emulator {} listening on {} (state {})", impl.identity, base_url(),
                      impl.options.state_dir.string());
    return impl.port;
}

std::string Emulator::base_url() const {
    return fmt::format("{}://{}:{}", impl_->scheme, impl_->options.host, impl_->port);
}

Task<void> Emulator::stop(Seconds grace) {
    auto impl = impl_;
    impl->service->stop();
    if (impl->server) {
        co_await impl->server->stop(grace);
    }
    impl->logger->info("acas-emulator stopped; sandboxes keep running");
}

}  // namespace maf_sandbox::emulator
