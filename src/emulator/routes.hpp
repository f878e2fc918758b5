// Internal: the data-plane routes, one file per resource. Each turns a routed request into a
// typed call of the SandboxService and renders its typed answer (or lets its Refusal through to
// with_refusals). The router (router.hpp) has already applied authentication, the api-version
// and the group's visibility of the sandbox before any of these runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "http_face.hpp"
#include "sandbox_service.hpp"

namespace maf_sandbox::emulator {

// What a nextLink is built from.
struct ListingLinks {
    std::string scheme = "https";
    std::string host;        // the listen address, when the request has no Host header
    std::uint16_t port = 0;  // the bound port
    std::size_t default_page_size = 100;
};

struct RouteContext {
    const Exchange& exchange;
    const std::string& group;        // the group prefix, lower-cased
    const std::string& api_version;  // one the router accepted
    SandboxService& service;
    const ListingLinks& links;

    const net::HttpRequest& request() const { return exchange.request; }
    const Route& route() const { return exchange.route; }
    const std::string& id() const { return exchange.route.sandbox_id; }
    std::optional<std::string> query(const std::string& key) const;
};

// routes_sandboxes.cpp: list, create, get, delete, stop, resume.
Task<net::HttpResponse> serve_sandboxes(const RouteContext& context);
// routes_policies.cpp: POST lifecycle and egressPolicy of a sandbox.
net::HttpResponse serve_policy(const RouteContext& context);
// routes_exec.cpp: executeShellCommand.
Task<net::HttpResponse> serve_exec(const RouteContext& context);
// routes_files.cpp: files read, write, delete, stat, list and mkdir.
Task<net::HttpResponse> serve_files(const RouteContext& context);
// routes_images.cpp: disk images and the public catalogue.
net::HttpResponse serve_images(const RouteContext& context);

}  // namespace maf_sandbox::emulator
