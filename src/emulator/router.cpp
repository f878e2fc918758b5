#include "router.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json/serialize.hpp>
#include <cctype>

#include "bearer_token.hpp"
#include "entra_token.hpp"
#include "maf_sandbox/emulator/emulator.hpp"
#include "unsupported_routes.hpp"
#include "wire_format.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
using net::HttpRequest;
using net::HttpResponse;

std::optional<std::string> RouteContext::query(const std::string& key) const {
    const auto& params = exchange.route.query;
    auto it = params.find(key);
    return it == params.end() ? std::nullopt : std::optional<std::string>(it->second);
}

Router::Router(RouterOptions options, std::shared_ptr<SandboxService> service,
               std::shared_ptr<FaultInjector> faults, std::shared_ptr<RequestMetrics> metrics,
               std::shared_ptr<spdlog::logger> logger)
    : options_(std::move(options)),
      service_(std::move(service)),
      faults_(std::move(faults)),
      metrics_(std::move(metrics)),
      logger_(std::move(logger)) {}

void Router::listening(std::string scheme, std::uint16_t port) {
    options_.links.scheme = std::move(scheme);
    options_.links.port = port;
}

Task<HttpResponse> Router::handle(const Exchange& exchange) {
    const auto& request = exchange.request;
    const bool own_route = exchange.route.endpoint == Endpoint::healthz ||
                           exchange.route.endpoint == Endpoint::metrics ||
                           exchange.route.endpoint == Endpoint::admin_faults;
    if (own_route && options_.entra_tokens) {
        throw no_such_route();  // the real service has none of them
    }
    switch (exchange.route.endpoint) {
        case Endpoint::invalid_target:
            throw Refusal{400, "BadRequest", "The request target is not a valid path."};
        case Endpoint::healthz:
            co_return json_response(
                200, json::object{{"status", "ok"}, {"identity", options_.identity}});
        case Endpoint::metrics:
            // Request counts and latencies per route describe every client's traffic: the token
            // guards them unless the operator made them public (--public-metrics).
            if (!options_.public_metrics &&
                !bearer_authorized(request.headers.get("authorization"), options_.token)) {
                throw Refusal{401, "Unauthorized",
                              "/metrics needs the emulator's bearer token (or start the emulator "
                              "with --public-metrics)."};
            }
            {
                HttpResponse r;
                r.headers.set("Content-Type", "text/plain; version=0.0.4");
                r.body = metrics_->render(service_->count_by_state());
                co_return r;
            }
        case Endpoint::admin_faults:
            co_return admin_faults(request);
        default:
            break;
    }
    if (!exchange.route.data_plane) {
        throw no_such_route();
    }
    co_return co_await data_plane(exchange);
}

// GET answers the active faults; PUT replaces them. Not itself subject to faults.
HttpResponse Router::admin_faults(const HttpRequest& request) {
    if (!bearer_authorized(request.headers.get("authorization"), options_.token)) {
        throw Refusal{401, "Unauthorized", "The admin routes need the emulator's token."};
    }
    if (request.method == "GET") {
        return json_response(200, faults_->document());
    }
    if (request.method != "PUT") {
        throw Refusal{405, "MethodNotAllowed", "Use GET or PUT on /admin/faults."};
    }
    const auto document = faults_->replace(parse_object_body(request.body, true));
    logger_->info("faults replaced: {}", json::serialize(document));
    return json_response(200, document);
}

Task<HttpResponse> Router::data_plane(const Exchange& exchange) {
    const auto& request = exchange.request;
    const auto& route = exchange.route;
    if (options_.entra_tokens) {
        if (const auto why = options_.entra_tokens->refusal(request.headers.get("authorization"),
                                                            std::chrono::system_clock::now())) {
            throw Refusal{401, "InvalidAuthenticationToken",
                          fmt::format("The access token is invalid: {}.", *why)};
        }
    } else if (!bearer_authorized(request.headers.get("authorization"), options_.token)) {
        throw Refusal{401, "Unauthorized",
                      "A valid bearer token for https://dynamicsessions.io is required."};
    }
    const auto found = route.query.find("api-version");
    const std::string api = found == route.query.end() ? std::string() : found->second;
    if (found == route.query.end() || (api != kApiVersion && api != kPagingApiVersion)) {
        throw Refusal{400, "UnsupportedApiVersion",
                      fmt::format("The api-version '{}' is not supported. Supported versions: "
                                  "{}, {}.",
                                  api.substr(0, 64), kApiVersion, kPagingApiVersion)};
    }
    // Each group is its own namespace of sandboxes and disk images (docs/emulator.md).
    std::string group = route.group;
    std::transform(group.begin(), group.end(), group.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (!route.sandbox_id.empty()) {
        service_->check_visible(group, route.sandbox_id);
    }
    const RouteContext context{exchange, group, api, *service_, options_.links};
    switch (route.endpoint) {
        case Endpoint::sandboxes_list:
        case Endpoint::sandboxes_create:
        case Endpoint::sandbox_get:
        case Endpoint::sandbox_delete:
        case Endpoint::sandbox_stop:
        case Endpoint::sandbox_resume:
            co_return co_await serve_sandboxes(context);
        case Endpoint::sandbox_execute:
            co_return co_await serve_exec(context);
        case Endpoint::sandbox_lifecycle:
        case Endpoint::sandbox_egress_policy:
            co_return serve_policy(context);
        case Endpoint::files_read:
        case Endpoint::files_write:
        case Endpoint::files_delete:
        case Endpoint::files_stat:
        case Endpoint::files_list:
        case Endpoint::files_mkdir:
            co_return co_await serve_files(context);
        case Endpoint::disk_images_list:
        case Endpoint::disk_images_create:
        case Endpoint::public_images_list:
        case Endpoint::public_image_get:
        case Endpoint::disk_image_get:
        case Endpoint::disk_image_delete:
            co_return serve_images(context);
        default:
            break;
    }
    if (const auto operation = unsupported_route(request.method, route.rest)) {
        throw Refusal{501, kRouteNotSupported,
                      fmt::format("'{}' is not implemented by acas-emulator.", *operation)};
    }
    throw no_such_route();
}

}  // namespace maf_sandbox::emulator
