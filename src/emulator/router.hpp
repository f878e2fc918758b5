// Internal: the emulator's innermost handler. It acts on routing.hpp's decision: health, metrics
// and fault administration outside the data plane; then, in it, authentication, the api-version,
// the group's visibility of the sandbox named, and the resource's routes (routes.hpp). A
// reference route the emulator does not implement answers 501.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <optional>
#include <string>

#include "fault_injector.hpp"
#include "http_face.hpp"
#include "request_metrics.hpp"
#include "routes.hpp"
#include "sandbox_service.hpp"

namespace maf_sandbox::emulator {

class EntraTokenCheck;

struct RouterOptions {
    std::optional<std::string> token;  // the bearer token every client must send
    bool public_metrics = false;       // /metrics without the token
    std::string identity;              // what /healthz reports
    // Set when impersonating the service: the data plane lets in only the tokens it accepts, and
    // the emulator's own routes answer as unknown ones.
    std::shared_ptr<const EntraTokenCheck> entra_tokens;
    ListingLinks links;
};

class Router {
  public:
    Router(RouterOptions options, std::shared_ptr<SandboxService> service,
           std::shared_ptr<FaultInjector> faults, std::shared_ptr<RequestMetrics> metrics,
           std::shared_ptr<spdlog::logger> logger);

    // Where the server listens, once it does (nextLink falls back to it).
    void listening(std::string scheme, std::uint16_t port);

    Task<net::HttpResponse> handle(const Exchange& exchange);

  private:
    net::HttpResponse admin_faults(const net::HttpRequest& request);
    Task<net::HttpResponse> data_plane(const Exchange& exchange);

    RouterOptions options_;
    std::shared_ptr<SandboxService> service_;
    std::shared_ptr<FaultInjector> faults_;
    std::shared_ptr<RequestMetrics> metrics_;
    std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace maf_sandbox::emulator
