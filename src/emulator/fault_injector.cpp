#include "fault_injector.hpp"

#include <fmt/format.h>

#include <cmath>

#include "refusal.hpp"
#include "timer_wait.hpp"
#include "wire_format.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
using net::HttpResponse;

namespace {

json::object faults_json(const FaultOptions& f) {
    return json::object{{"rate429", f.rate_429},
                        {"first403", f.first_403},
                        {"forbiddenMs", f.forbidden_ms},
                        {"rate5xx", f.rate_5xx},
                        {"latencyMs", f.latency_ms},
                        {"createDelayMs", f.create_delay_ms},
                        {"dropRate", f.drop_rate},
                        {"retryAfterMs", f.retry_after_ms},
                        {"only", f.only}};
}

}  // namespace

FaultInjector::FaultInjector(FaultOptions faults)
    : faults_(std::move(faults)),
      random_(faults_.seed != 0 ? faults_.seed : std::random_device{}()) {}

std::string FaultInjector::operation_key(const std::string& method,
                                         const std::vector<std::string>& rest) {
    std::string key = method + " ";
    for (std::size_t i = 0; i < rest.size(); ++i) {
        const bool id =
            i == 1 && (rest[0] == "sandboxes" || (rest[0] == "diskimages" && rest[1] != "public"));
        key += "/" + (id ? std::string("{id}") : rest[i]);
    }
    return key;
}

FaultInjector::Applicable FaultInjector::begin(const std::string& method,
                                               const std::vector<std::string>& rest) {
    Applicable applicable;
    std::lock_guard lock(mutex_);
    if (faults_.only.empty() || faults_.only == operation_key(method, rest)) {
        applicable.faults = faults_;
        applicable.since = epoch_;
        applicable.n = ++requests_;
    }
    return applicable;
}

double FaultInjector::chance() {
    std::lock_guard lock(mutex_);
    return std::uniform_real_distribution<double>(0.0, 1.0)(random_);
}

std::uint64_t FaultInjector::create_delay_ms() {
    std::lock_guard lock(mutex_);
    return faults_.create_delay_ms;
}

json::object FaultInjector::document() {
    std::lock_guard lock(mutex_);
    return faults_json(faults_);
}

json::object FaultInjector::replace(const json::object& body) {
    const auto number = [&](const char* key) -> double {
        const auto* v = body.if_contains(key);
        if (v == nullptr || v->is_null()) {
            return 0;
        }
        // Cast to integers below: bounded so no value is out of their range.
        if (!v->is_number() || !std::isfinite(v->to_number<double>()) ||
            v->to_number<double>() < 0 || v->to_number<double>() > 1e12) {
            throw Refusal{400, "InvalidFault",
                          fmt::format("'{}' must be a number between 0 and 1e12.", key)};
        }
        return v->to_number<double>();
    };
    const auto rate = [&](const char* key) {
        const double value = number(key);
        if (value > 1) {
            throw Refusal{400, "InvalidFault",
                          fmt::format("'{}' is a probability between 0 and 1.", key)};
        }
        return value;
    };
    for (const auto& [key, value] : body) {
        if (!faults_json(FaultOptions{}).contains(key)) {
            throw Refusal{400, "InvalidFault",
                          fmt::format("unknown fault '{}'.", std::string(key).substr(0, 64))};
        }
        (void)value;
    }
    FaultOptions f;
    f.rate_429 = rate("rate429");
    f.first_403 = static_cast<std::uint64_t>(number("first403"));
    f.forbidden_ms = static_cast<std::uint64_t>(number("forbiddenMs"));
    f.rate_5xx = rate("rate5xx");
    f.latency_ms = static_cast<std::uint64_t>(number("latencyMs"));
    f.create_delay_ms = static_cast<std::uint64_t>(number("createDelayMs"));
    f.drop_rate = rate("dropRate");
    f.retry_after_ms = static_cast<std::uint64_t>(number("retryAfterMs"));
    if (const auto* only = body.if_contains("only"); only != nullptr && !only->is_null()) {
        if (!only->is_string()) {
            throw Refusal{400, "InvalidFault",
                          "'only' names one operation, e.g. \"PUT /sandboxes\"."};
        }
        f.only = std::string(only->as_string());
    }
    std::lock_guard lock(mutex_);
    f.seed = faults_.seed;
    faults_ = f;
    requests_ = 0;
    epoch_ = std::chrono::steady_clock::now();
    return faults_json(f);
}

Handler with_faults(Handler inner, std::shared_ptr<FaultInjector> injector,
                    boost::asio::any_io_executor executor) {
    return [inner = std::move(inner), injector,
            executor](const Exchange& exchange) -> Task<HttpResponse> {
        if (!exchange.route.data_plane) {
            co_return co_await inner(exchange);
        }
        const auto applicable = injector->begin(exchange.request.method, exchange.route.rest);
        const auto& faults = applicable.faults;
        if (faults.latency_ms > 0) {
            co_await sleep_ms(executor, faults.latency_ms);
        }
        if ((faults.first_403 > 0 && applicable.n <= faults.first_403) ||
            std::chrono::steady_clock::now() - applicable.since <
                std::chrono::milliseconds(faults.forbidden_ms)) {
            co_return empty_response(403);
        }
        if (faults.rate_429 > 0 && injector->chance() < faults.rate_429) {
            const auto wait_ms = faults.retry_after_ms > 0 ? faults.retry_after_ms : 1000;
            auto r = problem_response(
                Refusal{429, "TooManyRequests",
                        fmt::format("Rate limit exceeded; retry after {} ms.", wait_ms)});
            r.headers.set("Retry-After", std::to_string((wait_ms + 999) / 1000));
            if (faults.retry_after_ms > 0) {
                r.headers.set("retry-after-ms", std::to_string(wait_ms));
            }
            co_return r;
        }
        if (faults.rate_5xx > 0 && injector->chance() < faults.rate_5xx) {
            co_return problem_response(
                Refusal{503, "ServiceUnavailable", "The service is temporarily unavailable."});
        }
        const bool drop = faults.drop_rate > 0 && injector->chance() < faults.drop_rate;
        auto response = co_await inner(exchange);
        if (drop) {
            throw net::AbortConnection(response);
        }
        co_return response;
    };
}

}  // namespace maf_sandbox::emulator
