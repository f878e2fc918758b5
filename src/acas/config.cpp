#include "maf_sandbox/acas/config.hpp"

#include <fmt/format.h>

#include "maf_sandbox/net/http.hpp"

namespace maf_sandbox::acas {

void AcasSandboxConfig::validate() const {
    if (endpoint.empty()) {
        throw InvalidArgument(
            "the ACAS endpoint is not set; pass --endpoint or ACAS_SANDBOX_ENDPOINT");
    }
    const auto parsed = net::parse_http_url(endpoint);
    if (!parsed.is_https()) {
        throw InvalidArgument("the ACAS endpoint must be an https URL; fix --endpoint");
    }
    if (endpoint.back() == '/') {
        throw InvalidArgument("the ACAS endpoint must not end with '/'; drop the trailing slash");
    }
    if (parsed.target != "/") {
        throw InvalidArgument(
            "the ACAS endpoint is a bare origin (https://host[:port]); drop the path");
    }
    require_path_segment(subscription_id, "the subscription id (--subscription-id)");
    require_path_segment(resource_group, "the resource group (--resource-group)");
    require_path_segment(sandbox_group, "the sandbox group (--sandbox-group)");
    for (const auto& [value, what] : {std::pair{read_timeout, "read_timeout"},
                                      {create_timeout, "create_timeout"},
                                      {delete_timeout, "delete_timeout"},
                                      {resume_timeout, "resume_timeout"},
                                      {probe_timeout, "probe_timeout"},
                                      {poll_interval, "poll_interval"},
                                      {client_wait, "client_wait_seconds"},
                                      {client_close, "client_close_seconds"},
                                      {client_idle, "client_idle_seconds"},
                                      {image_hint, "image_hint_seconds"}}) {
        if (!(value.count() > 0)) {
            throw InvalidArgument(fmt::format("{} must be positive", what));
        }
    }
    if (auto_suspend_seconds <= 0 || auto_delete_seconds <= 0) {
        throw InvalidArgument("the lifecycle intervals must be positive seconds");
    }
    if (max_clients_per_loop == 0) {
        throw InvalidArgument("max_clients_per_loop must be at least 1");
    }
    if (exec_output_limit_bytes == 0) {
        throw InvalidArgument("exec_output_limit_bytes must be at least 1");
    }
    if (token && token->empty()) {
        throw InvalidArgument("the static token is empty; pass a token or leave it unset");
    }
}

bool AcasSandboxConfig::emulator_mode() const {
    if (emulator)
        return true;
    try {
        return net::is_loopback_host(net::parse_http_url(endpoint).host);
    } catch (const InvalidArgument&) {
        return false;
    }
}

}  // namespace maf_sandbox::acas
