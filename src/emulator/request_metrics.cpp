#include "request_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox::emulator {
using net::HttpResponse;

namespace {

// The path of a target for a log line: no query (it may carry paths), bounded, one line.
std::string shown_target(const std::string& target) {
    auto path = target.substr(0, std::min<std::size_t>(target.find('?'), 200));
    for (auto& c : path) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
            c = '?';
        }
    }
    return replace_invalid_utf8(path);
}

}  // namespace

std::string_view method_label(const std::string& method) {
    for (const char* known : {"GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"}) {
        if (method == known) {
            return known;
        }
    }
    return "other";
}

void RequestMetrics::count(std::string_view method, std::string_view route, int status,
                           double seconds) {
    std::lock_guard lock(mutex_);
    ++requests_[fmt::format("method=\"{}\",route=\"{}\",status=\"{}\"", method, route, status)];
    auto& [sum, n] = latency_[std::string(route)];
    sum += seconds;
    ++n;
}

std::string RequestMetrics::render(const std::map<SandboxState, int>& by_state) {
    std::string out;
    out += "# HELP acas_emulator_requests_total HTTP requests by method, route and status.\n";
    out += "# TYPE acas_emulator_requests_total counter\n";
    {
        std::lock_guard lock(mutex_);
        for (const auto& [labels, count] : requests_) {
            out += fmt::format("acas_emulator_requests_total{{{}}} {}\n", labels, count);
        }
        out += "# HELP acas_emulator_request_seconds Request latency by route.\n";
        out += "# TYPE acas_emulator_request_seconds summary\n";
        for (const auto& [route, value] : latency_) {
            out += fmt::format("acas_emulator_request_seconds_sum{{route=\"{}\"}} {:.6f}\n", route,
                               value.first);
            out += fmt::format("acas_emulator_request_seconds_count{{route=\"{}\"}} {}\n", route,
                               value.second);
        }
    }
    out += "# HELP acas_emulator_sandboxes Sandboxes by state.\n";
    out += "# TYPE acas_emulator_sandboxes gauge\n";
    // Listed by the state's name, as scrapers have always seen them.
    std::map<std::string_view, int> by_name;
    for (const auto& [state, count] : by_state) {
        by_name[wire_name(state)] = count;
    }
    for (const auto& [state, count] : by_name) {
        out += fmt::format("acas_emulator_sandboxes{{state=\"{}\"}} {}\n", state, count);
    }
    return out;
}

Handler with_metrics(Handler inner, std::shared_ptr<RequestMetrics> metrics,
                     std::shared_ptr<spdlog::logger> logger, std::string identity) {
    return [inner = std::move(inner), metrics, logger,
            identity](const Exchange& exchange) -> Task<HttpResponse> {
        const auto started = std::chrono::steady_clock::now();
        const std::string_view route_label = route_name(exchange.route.endpoint);
        HttpResponse response;
        bool dropped = false;
        try {
            response = co_await inner(exchange);
        } catch (const net::AbortConnection& abort) {
            response = abort.partial();
            dropped = true;
        }
        if (!identity.empty()) {
            response.headers.set("x-acas-emulator", identity);
        }
        response.headers.set("x-ms-request-id", exchange.request_id);
        response.headers.set("x-ms-client-request-id", exchange.request_id);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        const auto method = method_label(exchange.request.method);
        metrics->count(method, route_label, response.status, seconds);
        logger->info("request id={} {} {} route={} status={} ms={:.1f}", exchange.request_id,
                     method, shown_target(exchange.request.target), route_label, response.status,
                     seconds * 1000);
        if (dropped) {
            throw net::AbortConnection(response);
        }
        co_return response;
    };
}

}  // namespace maf_sandbox::emulator
