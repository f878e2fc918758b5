#include "maf_sandbox/emulator/emulator.hpp"

#include <spdlog/spdlog.h>

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/url.hpp>
#include <boost/url/url_view.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "background_work.hpp"
#include "bearer_token.hpp"
#include "body_checks.hpp"
#include "egress_policy.hpp"
#include "engine.hpp"
#include "field_support.hpp"
#include "file_plane.hpp"
#include "guest_path.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/utf8.hpp"
#include "maf_sandbox/net/http_server.hpp"
#include "maf_sandbox/net/tls.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "registry_standin.hpp"
#include "routing.hpp"
#include "state_store.hpp"
#include "unsupported_routes.hpp"

namespace maf_sandbox::emulator {
namespace asio = boost::asio;
namespace json = boost::json;
using net::HttpRequest;
using net::HttpResponse;

namespace {

constexpr std::uint64_t kExecOutputCeiling = 1048576;
constexpr std::size_t kMaxLabelValue = 63;
constexpr std::uint64_t kMaxFileRead = 256ull * 1024 * 1024;
constexpr auto kExecServerTimeout = std::chrono::minutes(30);
// A deletion that failed (the runtime could not remove the sandbox's files yet, e.g. on a full
// disk) is tried again by the lifecycle sweep after this long.
constexpr auto kDeleteRetryAfter = std::chrono::seconds(2);
// A launch that failed for want of space (the runtime's directory shares the full disk) is tried
// again this often, for at most this long, before the sandbox is Failed.
constexpr std::uint64_t kLaunchRetryMs = 1000;
constexpr auto kLaunchRetryWindow = std::chrono::minutes(5);
// A sandbox Creating this long with no launch running was left behind by one (the sweep then
// settles it); younger ones may be between their record and their launch starting.
constexpr double kStuckCreatingSeconds = 5;
const char* const kRegion = "local";

// A refusal answered as application/problem+json.
struct Problem {
    int status;
    std::string title;
    std::string detail;
    int error_code = 0;
};

HttpResponse problem_response(const Problem& p) {
    HttpResponse r;
    r.status = p.status;
    r.headers.set("Content-Type", "application/problem+json");
    // Details quote request text (paths, ids, image names), which may not be UTF-8: a JSON
    // string must be, so invalid sequences become U+FFFD.
    json::object body{
        {"title", replace_invalid_utf8(p.title)},
        {"status", p.status},
        {"detail", replace_invalid_utf8(p.detail.size() > 1024 ? p.detail.substr(0, 1024) + "..."
                                                               : p.detail)}};
    body["errorCode"] = p.error_code != 0 ? p.error_code : p.status;
    r.body = json::serialize(body);
    return r;
}

// Whether `e` reports a full disk or an exhausted quota: a SystemError, FileError (the root
// builder's) or filesystem_error with that errno, or an Error from deeper in the runtime that
// quotes the errno's text.
bool out_of_space(const std::exception& e) {
    const auto full = [](int error) { return error == ENOSPC || error == EDQUOT; };
    if (const auto* system = dynamic_cast<const SystemError*>(&e)) {
        return full(system->error_number());
    }
    if (const auto* file = dynamic_cast<const FileError*>(&e)) {
        return full(file->error_number());
    }
    if (const auto* fs = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
        return full(fs->code().value());
    }
    const std::string_view what = e.what();
    return what.find(::strerrordesc_np(ENOSPC)) != std::string_view::npos ||
           what.find(::strerrordesc_np(EDQUOT)) != std::string_view::npos;
}

HttpResponse json_response(int status, const json::value& body) {
    HttpResponse r;
    r.status = status;
    r.headers.set("Content-Type", "application/json; charset=utf-8");
    r.body = json::serialize(body);
    return r;
}

HttpResponse empty_response(int status) {
    HttpResponse r;
    r.status = status;
    return r;
}

Problem not_found(const std::string& id) {
    return Problem{404, "SandboxNotFound", "Requested document not found.", 1};
    (void)id;
}

Problem not_running(const std::string& id) {
    return Problem{409, "SandboxNotRunning",
                   fmt::format("Sandbox '{}' is not in Running state", id)};
}

json::object parse_object_body(const std::string& body, bool allow_empty) {
    if (body.empty() && allow_empty) {
        return {};
    }
    boost::system::error_code ec;
    auto value = json::parse(body, ec);
    if (ec || !value.is_object()) {
        throw Problem{400, "One or more validation errors occurred.",
                      "The request body must be a JSON object."};
    }
    return value.as_object();
}

std::string string_field(const json::object& o, const char* key) {
    if (auto* v = o.if_contains(key); v != nullptr && v->is_string()) {
        return std::string(v->as_string());
    }
    return {};
}

std::map<std::string, std::string> parse_labels(const json::object& body) {
    std::map<std::string, std::string> out;
    const auto* v = body.if_contains("labels");
    if (v == nullptr || v->is_null()) {
        return out;
    }
    if (!v->is_object()) {
        throw Problem{400, "One or more validation errors occurred.",
                      "'labels' must be an object of string values."};
    }
    for (const auto& [k, value] : v->as_object()) {
        if (!value.is_string()) {
            throw Problem{400, "One or more validation errors occurred.",
                          fmt::format("Label value for key '{}' must be a string", k)};
        }
        if (k.empty()) {
            throw Problem{400, "One or more validation errors occurred.",
                          "Label keys must not be empty"};
        }
        if (value.as_string().size() > kMaxLabelValue) {
            throw Problem{
                400, "One or more validation errors occurred.",
                fmt::format("Label value for key '{}' exceeds 63 characters", std::string(k))};
        }
        out[std::string(k)] = std::string(value.as_string());
    }
    return out;
}

// "1000m" -> 1.0, "2" -> 2.0; "2048Mi" -> bytes. Unparseable values count as unset.
double parse_cpu(const std::string& text) {
    if (text.empty()) {
        return 0;
    }
    try {
        const double value = text.back() == 'm'
                                 ? std::stod(text.substr(0, text.size() - 1)) / 1000.0
                                 : std::stod(text);
        return std::isfinite(value) && value > 0 ? value : 0;
    } catch (...) {
        return 0;
    }
}

std::uint64_t parse_quantity(const std::string& text) {
    static const std::pair<const char*, std::uint64_t> units[] = {
        {"Ki", 1ull << 10}, {"Mi", 1ull << 20}, {"Gi", 1ull << 30},  {"Ti", 1ull << 40},
        {"K", 1000ull},     {"M", 1000000ull},  {"G", 1000000000ull}};
    for (const auto& [suffix, factor] : units) {
        if (text.ends_with(suffix)) {
            try {
                const double value = std::stod(text.substr(0, text.size() - std::strlen(suffix))) *
                                     static_cast<double>(factor);
                // Out of range (or NaN): unset, never a cast of a value no integer holds.
                return std::isfinite(value) && value > 0 && value < 0x1p63
                           ? static_cast<std::uint64_t>(value)
                           : 0;
            } catch (...) {
                return 0;
            }
        }
    }
    try {
        return static_cast<std::uint64_t>(std::stoull(text));
    } catch (...) {
        return 0;
    }
}

bool truthy(const std::optional<std::string>& value, bool fallback) {
    if (!value) {
        return fallback;
    }
    return *value == "true" || *value == "True" || *value == "1";
}

struct Query {
    std::map<std::string, std::string> params;
    std::optional<std::string> get(const std::string& key) const {
        auto it = params.find(key);
        return it == params.end() ? std::nullopt : std::optional<std::string>(it->second);
    }
};

struct Metrics {
    std::mutex mutex;
    std::map<std::string, std::uint64_t> requests;                    // label set -> count
    std::map<std::string, std::pair<double, std::uint64_t>> latency;  // route -> (sum s, count)
};

}  // namespace

struct Emulator::Impl : std::enable_shared_from_this<Impl> {
    Impl(asio::any_io_executor ex, EmulatorOptions opts, std::shared_ptr<spdlog::logger> log)
        : executor(std::move(ex)),
          options(std::move(opts)),
          logger(std::move(log)),
          pool(options.worker_threads),
          store(options.state_dir),
          registry(options.state_dir),
          engine(make_runtime_engine(options.state_dir / "runtime")),
          random(options.faults.seed != 0 ? options.faults.seed : std::random_device{}()) {
        catalogue["host"] = "host";
        for (const auto& [name, image] : options.aliases) {
            catalogue[name] = image;
        }
        identity =
            fmt::format("{}; isolation={}", kEmulatorVersion, to_string(engine->isolation()));
    }

    asio::any_io_executor executor;
    EmulatorOptions options;
    std::shared_ptr<spdlog::logger> logger;
    asio::thread_pool pool;
    StateStore store;
    RegistryStandIn registry;
    std::unique_ptr<SandboxEngine> engine;
    std::map<std::string, std::string> catalogue;
    std::string identity;
    std::unique_ptr<net::HttpServer> server;
    std::string scheme = "https";
    std::uint16_t port = 0;
    std::mutex fault_mutex;  // options.faults, fault_epoch and data_plane_requests
    std::uint64_t data_plane_requests = 0;
    std::chrono::steady_clock::time_point fault_epoch = std::chrono::steady_clock::now();
    std::atomic<std::uint64_t> request_counter{0};
    std::mutex random_mutex;
    std::mt19937_64 random;
    Metrics metrics;
    std::atomic<bool> stopping{false};
    std::shared_ptr<asio::steady_timer> sweeper;
    bool state_unsaved = false;  // the sweep's last save failed (logged once)
    std::mutex freeze_mutex;     // serialises freezer writes so the last state change wins
    BackgroundWork work;         // launches and deletions in flight, for the sweep

    // --- helpers ------------------------------------------------------------------------------

    // Runs blocking `f` on the worker pool and resumes the caller on its own executor with the
    // result (or the exception). Built on async_initiate rather than a coroutine lambda: GCC 12
    // destroys captured temporaries of a co_await expression twice.
    template <typename F>
    auto offload(F&& job) {
        using Fn = std::decay_t<F>;
        using R = std::invoke_result_t<Fn&>;
        using Value = std::conditional_t<std::is_void_v<R>, int, R>;
        return asio::async_initiate<const asio::use_awaitable_t<>&,
                                    void(std::exception_ptr, Value)>(
            [this](auto handler, Fn fn) {
                asio::post(pool, [fn = std::move(fn), handler = std::move(handler)]() mutable {
                    std::exception_ptr failure;
                    Value value{};
                    try {
                        if constexpr (std::is_void_v<R>) {
                            fn();
                        } else {
                            value = fn();
                        }
                    } catch (...) {
                        failure = std::current_exception();
                    }
                    auto target = asio::get_associated_executor(handler);
                    asio::dispatch(target, [handler = std::move(handler), failure,
                                            value = std::move(value)]() mutable {
                        handler(failure, std::move(value));
                    });
                });
            },
            asio::use_awaitable, Fn(std::forward<F>(job)));
    }

    Task<void> sleep_ms(std::uint64_t ms) {
        asio::steady_timer timer(executor, std::chrono::milliseconds(ms));
        boost::system::error_code ec;
        co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }

    double chance() {
        std::lock_guard lock(random_mutex);
        return std::uniform_real_distribution<double>(0.0, 1.0)(random);
    }

    // --- startup ------------------------------------------------------------------------------

    void reattach() {
        for (const auto& doc : store.sandboxes()) {
            if (doc.state == states::kDeleting) {
                spawn_delete(doc.id);
                continue;
            }
            if (doc.state == states::kCreating && doc.handle.empty()) {
                store.record(doc.id, [](SandboxDoc& d) {
                    d.state = states::kFailed;
                    d.failure = "the emulator stopped while the sandbox was being created";
                    d.state_since = unix_now();
                });
                continue;
            }
            if (doc.state != states::kFailed && !doc.handle.empty() && !engine->alive(doc.handle)) {
                logger->warn("sandbox {} is no longer running; marking it Failed", doc.id);
                store.record(doc.id, [](SandboxDoc& d) {
                    d.state = states::kFailed;
                    d.failure = "the sandbox's processes ended while the emulator was down";
                    d.state_since = unix_now();
                });
            }
        }
    }

    // --- routing ------------------------------------------------------------------------------

    // A bounded method label: any other token a client sends counts as "other".
    static std::string_view method_label(const std::string& method) {
        for (const char* known : {"GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"}) {
            if (method == known) {
                return known;
            }
        }
        return "other";
    }

    Task<HttpResponse> handle(HttpRequest request) {
        const auto started = std::chrono::steady_clock::now();
        const auto request_id = request.headers.get("x-ms-client-request-id")
                                    .value_or(fmt::format("emu-{}", ++request_counter));
        // Logs and metrics name the route from routing.hpp's fixed table, never request text.
        const Route route = route_request(request.method, request.target);
        const std::string_view route_label = route_name(route.endpoint);
        HttpResponse response;
        bool drop = false;
        try {
            response = co_await dispatch(request, route, drop);
        } catch (const Problem& p) {
            response = problem_response(p);
        } catch (const PlaneError& p) {
            response = problem_response(Problem{p.status, p.title, p.detail});
        } catch (const StateRecordTooLarge& e) {
            response = problem_response(Problem{413, "RequestEntityTooLarge", e.what()});
        } catch (const StateNotPersisted& e) {
            // The change was undone (state_store.hpp): a client may retry. The detail names the
            // state file, a host path: it goes to the log only.
            logger->error("request {} {} failed: {}", request_id, route_label, e.detail());
            response = problem_response(
                Problem{e.no_space() ? 507 : 500,
                        e.no_space() ? "InsufficientStorage" : "InternalServerError", e.what()});
        } catch (const std::exception& e) {
            // Runtime and system errors name host paths: the log has them, the client a fixed
            // sentence it can quote back.
            logger->error("request {} {} failed: {}", request_id, route_label, e.what());
            response = problem_response(
                Problem{500, "InternalServerError",
                        fmt::format("The emulator failed to complete the request; its log has the "
                                    "reason under request id {}.",
                                    request_id)});
        }
        response.headers.set("x-acas-emulator", identity);
        response.headers.set("x-ms-request-id", request_id);
        response.headers.set("x-ms-client-request-id", request_id);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        {
            std::lock_guard lock(metrics.mutex);
            ++metrics.requests[fmt::format("method=\"{}\",route=\"{}\",status=\"{}\"",
                                           method_label(request.method), route_label,
                                           response.status)];
            auto& [sum, count] = metrics.latency[std::string(route_label)];
            sum += seconds;
            ++count;
        }
        logger->info("request id={} {} {} route={} status={} ms={:.1f}", request_id,
                     method_label(request.method), shown_target(request.target), route_label,
                     response.status, seconds * 1000);
        if (drop) {
            throw net::AbortConnection(response);
        }
        co_return response;
    }

    // The path of a target for a log line: no query (it may carry paths), bounded, one line.
    static std::string shown_target(const std::string& target) {
        auto path = target.substr(0, std::min<std::size_t>(target.find('?'), 200));
        for (auto& c : path) {
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
                c = '?';
            }
        }
        return replace_invalid_utf8(path);
    }

    // Acts on routing.hpp's decision: the one place a target is parsed and matched.
    Task<HttpResponse> dispatch(const HttpRequest& request, const Route& route, bool& drop) {
        switch (route.endpoint) {
            case Endpoint::invalid_target:
                throw Problem{400, "BadRequest", "The request target is not a valid path."};
            case Endpoint::healthz:
                co_return json_response(200,
                                        json::object{{"status", "ok"}, {"identity", identity}});
            case Endpoint::metrics:
                // Request counts and latencies per route describe every client's traffic: the
                // token guards them unless the operator made them public (--public-metrics).
                if (!options.public_metrics &&
                    !bearer_authorized(request.headers.get("authorization"), options.token)) {
                    throw Problem{401, "Unauthorized",
                                  "/metrics needs the emulator's bearer token (or start the "
                                  "emulator with --public-metrics)."};
                }
                co_return metrics_response();
            case Endpoint::admin_faults:
                co_return admin_faults(request);
            default:
                break;
        }
        if (!route.data_plane) {
            throw Problem{404, "NotFound", "No data-plane route matches this path."};
        }
        const Query query{route.query};
        // --- the data plane: faults, then authentication, then the api-version -----------------
        FaultOptions faults;
        std::chrono::steady_clock::time_point faults_since;
        std::uint64_t n = 0;
        {
            std::lock_guard lock(fault_mutex);
            if (options.faults.only.empty() ||
                options.faults.only == operation_key(request.method, route.rest)) {
                faults = options.faults;
                faults_since = fault_epoch;
                n = ++data_plane_requests;
            }
        }
        if (faults.latency_ms > 0) {
            co_await sleep_ms(faults.latency_ms);
        }
        if ((faults.first_403 > 0 && n <= faults.first_403) ||
            std::chrono::steady_clock::now() - faults_since <
                std::chrono::milliseconds(faults.forbidden_ms)) {
            co_return empty_response(403);
        }
        if (faults.rate_429 > 0 && chance() < faults.rate_429) {
            const auto wait_ms = faults.retry_after_ms > 0 ? faults.retry_after_ms : 1000;
            auto r = problem_response(
                Problem{429, "TooManyRequests",
                        fmt::format("Rate limit exceeded; retry after {} ms.", wait_ms)});
            r.headers.set("Retry-After", std::to_string((wait_ms + 999) / 1000));
            if (faults.retry_after_ms > 0) {
                r.headers.set("retry-after-ms", std::to_string(wait_ms));
            }
            co_return r;
        }
        if (faults.rate_5xx > 0 && chance() < faults.rate_5xx) {
            co_return problem_response(
                Problem{503, "ServiceUnavailable", "The service is temporarily unavailable."});
        }
        drop = faults.drop_rate > 0 && chance() < faults.drop_rate;

        if (!bearer_authorized(request.headers.get("authorization"), options.token)) {
            throw Problem{401, "Unauthorized",
                          "A valid bearer token for https://dynamicsessions.io is required."};
        }
        const auto api = query.get("api-version");
        if (!api || (*api != kApiVersion && *api != kPagingApiVersion)) {
            throw Problem{
                400, "UnsupportedApiVersion",
                fmt::format("The api-version '{}' is not supported. Supported versions: "
                            "{}, {}.",
                            api.value_or("").substr(0, 64), kApiVersion, kPagingApiVersion)};
        }
        // Each group is its own namespace of sandboxes and disk images (docs/emulator.md).
        std::string group = route.group;
        std::transform(group.begin(), group.end(), group.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        const std::string& id = route.sandbox_id;
        // A sandbox of another group does not exist here.
        if (!id.empty()) {
            if (auto doc = store.sandbox(id); doc && !in_group(doc->group, group)) {
                throw not_found(id);
            }
        }
        switch (route.endpoint) {
            case Endpoint::sandboxes_list:
                co_return list_sandboxes(request, query, *api, route.group, group);
            case Endpoint::sandboxes_create:
                co_return create_sandbox(request, group);
            case Endpoint::sandbox_get:
                co_return json_response(200, require(id).to_wire(kRegion));
            case Endpoint::sandbox_delete:
                co_return delete_sandbox(id);
            case Endpoint::sandbox_stop: {
                auto answer = stop_sandbox(id);
                co_await offload_freeze(id);
                co_return answer;
            }
            case Endpoint::sandbox_resume: {
                auto answer = resume_sandbox(id);
                co_await offload_freeze(id);
                co_return answer;
            }
            case Endpoint::sandbox_execute:
                co_return co_await execute(id, request);
            case Endpoint::sandbox_lifecycle:
                co_return set_policy(id, request, "lifecycle");
            case Endpoint::sandbox_egress_policy:
                co_return set_policy(id, request, "egressPolicy");
            case Endpoint::files_read:
            case Endpoint::files_write:
            case Endpoint::files_delete:
            case Endpoint::files_stat:
            case Endpoint::files_list:
            case Endpoint::files_mkdir:
                co_return co_await files(id, request, query, route.endpoint);
            case Endpoint::disk_images_list:
            case Endpoint::disk_images_create:
            case Endpoint::public_images_list:
            case Endpoint::public_image_get:
            case Endpoint::disk_image_get:
            case Endpoint::disk_image_delete:
                co_return disk_images(request, route, group);
            default:
                break;
        }
        if (const auto operation = unsupported_route(request.method, route.rest)) {
            throw Problem{501, kRouteNotSupported,
                          fmt::format("'{}' is not implemented by acas-emulator.", *operation)};
        }
        throw Problem{404, "NotFound", "No data-plane route matches this path."};
    }

    // --- fault administration (not itself subject to faults) ------------------------------------

    // "PUT /sandboxes", "POST /sandboxes/{id}/executeShellCommand": what --fault-only names.
    static std::string operation_key(const std::string& method,
                                     const std::vector<std::string>& rest) {
        std::string key = method + " ";
        for (std::size_t i = 0; i < rest.size(); ++i) {
            const bool id = i == 1 && (rest[0] == "sandboxes" ||
                                       (rest[0] == "diskimages" && rest[1] != "public"));
            key += "/" + (id ? std::string("{id}") : rest[i]);
        }
        return key;
    }

    static json::object faults_json(const FaultOptions& f) {
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

    // GET answers the active faults; PUT replaces them (absent keys are off) and restarts the
    // counters the 403 window and first-N faults count from.
    HttpResponse admin_faults(const HttpRequest& request) {
        if (!bearer_authorized(request.headers.get("authorization"), options.token)) {
            throw Problem{401, "Unauthorized", "The admin routes need the emulator's token."};
        }
        if (request.method == "GET") {
            std::lock_guard lock(fault_mutex);
            return json_response(200, faults_json(options.faults));
        }
        if (request.method != "PUT") {
            throw Problem{405, "MethodNotAllowed", "Use GET or PUT on /admin/faults."};
        }
        const auto body = parse_object_body(request.body, true);
        const auto number = [&](const char* key) -> double {
            const auto* v = body.if_contains(key);
            if (v == nullptr || v->is_null()) {
                return 0;
            }
            // Cast to integers below: bounded so no value is out of their range.
            if (!v->is_number() || !std::isfinite(v->to_number<double>()) ||
                v->to_number<double>() < 0 || v->to_number<double>() > 1e12) {
                throw Problem{400, "InvalidFault",
                              fmt::format("'{}' must be a number between 0 and 1e12.", key)};
            }
            return v->to_number<double>();
        };
        const auto rate = [&](const char* key) {
            const double value = number(key);
            if (value > 1) {
                throw Problem{400, "InvalidFault",
                              fmt::format("'{}' is a probability between 0 and 1.", key)};
            }
            return value;
        };
        for (const auto& [key, value] : body) {
            if (!faults_json(FaultOptions{}).contains(key)) {
                throw Problem{400, "InvalidFault",
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
                throw Problem{400, "InvalidFault",
                              "'only' names one operation, e.g. \"PUT /sandboxes\"."};
            }
            f.only = std::string(only->as_string());
        }
        std::lock_guard lock(fault_mutex);
        f.seed = options.faults.seed;
        options.faults = f;
        data_plane_requests = 0;
        fault_epoch = std::chrono::steady_clock::now();
        logger->info("faults replaced: {}", json::serialize(faults_json(f)));
        return json_response(200, faults_json(f));
    }

    SandboxDoc require(const std::string& id) {
        auto doc = store.sandbox(id);
        if (!doc) {
            throw not_found(id);
        }
        return *doc;
    }

    // --- sandboxes ----------------------------------------------------------------------------

    HttpResponse list_sandboxes(const HttpRequest& request, const Query& query,
                                const std::string& api, const std::string& group_prefix,
                                const std::string& group) {
        std::map<std::string, std::string> selector;
        if (auto labels = query.get("labels"); labels && !labels->empty()) {
            std::string_view rest = *labels;
            while (!rest.empty()) {
                const auto comma = rest.find(',');
                const auto item = rest.substr(0, comma);
                const auto eq = item.find('=');
                if (eq == std::string_view::npos || eq == 0) {
                    throw Problem{
                        400, "InvalidLabelSelector",
                        fmt::format("The label selector item '{}' must be key=value.", item)};
                }
                selector[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
                if (comma == std::string_view::npos) {
                    break;
                }
                rest.remove_prefix(comma + 1);
            }
        }
        std::vector<json::value> matching;
        for (const auto& doc : store.sandboxes()) {
            bool ok = in_group(doc.group, group);
            for (const auto& [k, v] : selector) {
                auto it = doc.labels.find(k);
                if (it == doc.labels.end() || it->second != v) {
                    ok = false;
                    break;
                }
            }
            if (ok) {
                matching.emplace_back(doc.to_wire(kRegion));
            }
        }
        std::size_t page_size = options.default_page_size;
        if (auto ps = query.get("pageSize")) {
            std::size_t value = 0;
            auto [p, ec] = std::from_chars(ps->data(), ps->data() + ps->size(), value);
            if (ec != std::errc{} || value == 0 || value > 1000) {
                throw Problem{400, "InvalidPageSize", "pageSize must be between 1 and 1000."};
            }
            page_size = value;
        }
        std::size_t offset = 0;
        if (auto token = query.get("skipToken")) {
            auto [p, ec] = std::from_chars(token->data(), token->data() + token->size(), offset);
            if (ec != std::errc{}) {
                throw Problem{400, "InvalidSkipToken", "The skipToken is not valid."};
            }
        }
        json::array page;
        for (std::size_t i = offset; i < matching.size() && page.size() < page_size; ++i) {
            page.push_back(matching[i]);
        }
        json::object body{{"value", std::move(page)}};
        if (offset + page_size < matching.size()) {
            boost::urls::url next;
            next.set_scheme(scheme);
            next.set_encoded_authority(
                request.headers.get("host").value_or(fmt::format("{}:{}", options.host, port)));
            next.set_path(group_prefix + "/sandboxes");
            next.params().append({"api-version", api});
            if (auto labels = query.get("labels"); labels && !labels->empty()) {
                next.params().append({"labels", *labels});
            }
            next.params().append({"pageSize", std::to_string(page_size)});
            next.params().append({"skipToken", std::to_string(offset + page_size)});
            body["nextLink"] = std::string(next.buffer());
        }
        return json_response(200, body);
    }

    std::string resolve_source(const json::object& body, const std::string& group) {
        const auto* sources = body.if_contains("sourcesRef");
        if (sources == nullptr || !sources->is_object()) {
            if (body.contains("presetSandboxType")) {
                throw Problem{400, "PresetNotSupported",
                              "The emulator has no preset sandbox types; pass sourcesRef."};
            }
            throw Problem{400, "One or more validation errors occurred.",
                          "'sourcesRef' is required when not using a preset sandbox type"};
        }
        const auto& s = sources->as_object();
        if (s.contains("snapshot")) {
            throw Problem{400, "SnapshotNotSupported", "The emulator does not support snapshots."};
        }
        const auto* disk = s.if_contains("diskImage");
        if (disk == nullptr || !disk->is_object()) {
            throw Problem{400, "One or more validation errors occurred.",
                          "'sourcesRef.diskImage' must be an object."};
        }
        const auto id = string_field(disk->as_object(), "id");
        if (!id.empty()) {
            auto image = store.disk_image(id);
            if (!image || !in_group(image->group, group)) {
                throw Problem{404, "DiskImageNotFound",
                              fmt::format("Disk image '{}' was not found.", id)};
            }
            if (image->state != "Ready") {
                throw Problem{409, "DiskImageNotReady",
                              fmt::format("Disk image '{}' is {}.", id, image->state)};
            }
            return image->local_image;
        }
        const auto name = string_field(disk->as_object(), "name");
        if (auto it = catalogue.find(name.empty() ? "ubuntu" : name); it != catalogue.end()) {
            return it->second;
        }
        for (const auto& image : store.disk_images()) {
            if (!name.empty() && image.name == name && image.state == "Ready" &&
                in_group(image.group, group)) {
                return image.local_image;
            }
        }
        throw Problem{404, "DiskImageNotFound",
                      fmt::format("Public disk image '{}' was not found.", name)};
    }

    // cpu and memory are quantities the runtime enforces: refuse one it would read as unset.
    static void check_resources(const json::object& body) {
        const auto* resources = body.if_contains("resources");
        if (resources == nullptr || !resources->is_object()) {
            return;  // absent; a wrong type was refused by check_create_body
        }
        const auto& r = resources->as_object();
        if (const auto* cpu = r.if_contains("cpu"); cpu != nullptr && !cpu->is_null()) {
            if (!cpu->is_string() || parse_cpu(std::string(cpu->as_string())) <= 0 ||
                parse_cpu(std::string(cpu->as_string())) > 1024) {
                throw Problem{400, "One or more validation errors occurred.",
                              "'resources.cpu' must be a CPU quantity string such as \"1000m\" "
                              "or \"2\" (at most 1024 CPUs)."};
            }
        }
        if (const auto* memory = r.if_contains("memory"); memory != nullptr && !memory->is_null()) {
            if (!memory->is_string() || parse_quantity(std::string(memory->as_string())) == 0) {
                throw Problem{400, "One or more validation errors occurred.",
                              "'resources.memory' must be a memory quantity string such as "
                              "\"2048Mi\" or \"2Gi\"."};
            }
        }
    }

    HttpResponse create_sandbox(const HttpRequest& request, const std::string& group) {
        const auto body = parse_object_body(request.body, false);
        auto labels = parse_labels(body);
        for (const char* key : {"entrypoint", "cmd"}) {
            if (const auto* v = body.if_contains(key); v != nullptr && !v->is_null()) {
                bool ok = v->is_array();
                if (ok) {
                    for (const auto& item : v->as_array()) {
                        ok = ok && item.is_string();
                    }
                }
                if (!ok) {
                    HttpResponse r = json_response(
                        400,
                        json::object{
                            {"title", "One or more validation errors occurred."},
                            {"status", 400},
                            {"errors",
                             json::object{{fmt::format("$.{}", key),
                                           json::array{"The JSON value could not be converted to "
                                                       "System.Collections.Generic."
                                                       "IReadOnlyList`1[System.String]."}}}}});
                    r.headers.set("Content-Type", "application/problem+json");
                    return r;
                }
            }
        }
        refuse_unsupported_create_fields(body);
        check_create_body(body);
        check_resources(body);
        const auto image = resolve_source(body, group);
        SandboxDoc doc;
        doc.id = new_guid();
        doc.group = group;
        doc.labels = std::move(labels);
        doc.created_at = iso_time(unix_now());
        doc.state_since = doc.last_activity = unix_now();
        doc.image = image;
        doc.sources_ref = body.at("sourcesRef").as_object();
        if (auto* di = doc.sources_ref.if_contains("diskImage");
            di != nullptr && di->is_object() && di->as_object().contains("id") &&
            !di->as_object().contains("isPublic")) {
            di->as_object()["isPublic"] = false;
        }
        doc.resources = json::object{{"cpu", "1000m"}, {"memory", "2048Mi"}};
        if (const auto* r = body.if_contains("resources"); r != nullptr && r->is_object()) {
            for (const auto& [k, v] : r->as_object()) {
                doc.resources[k] = v;
            }
        }
        doc.egress_policy = json::object{{"defaultAction", "Allow"}};
        if (const auto* e = body.if_contains("egressPolicy"); e != nullptr && e->is_object()) {
            doc.egress_policy = e->as_object();
        }
        checked_egress(doc.egress_policy);
        if (const auto* l = body.if_contains("lifecycle"); l != nullptr && l->is_object()) {
            doc.lifecycle = l->as_object();
        }
        if (const auto* env = body.if_contains("environment"); env != nullptr && env->is_object()) {
            doc.environment = env->as_object();
        }
        store.put_new(doc);
        logger->info("sandbox {} created from image {} (Creating)", doc.id, image);
        spawn_launch(doc);
        return json_response(201, doc.to_wire(kRegion));
    }

    void spawn_launch(SandboxDoc doc) {
        auto self = shared_from_this();
        if (!work.begin_launch(doc.id)) {
            return;
        }
        asio::co_spawn(
            executor,
            [self, doc]() -> Task<void> {
                struct Done {
                    BackgroundWork& work;
                    const std::string& id;
                    ~Done() { work.end_launch(id); }
                } done{self->work, doc.id};
                std::uint64_t create_delay = 0;
                {
                    std::lock_guard lock(self->fault_mutex);
                    create_delay = self->options.faults.create_delay_ms;
                }
                if (create_delay > 0) {
                    co_await self->sleep_ms(create_delay);
                }
                LaunchRequest launch;
                launch.id = doc.id;
                launch.image = doc.image;
                for (const auto& [k, v] : doc.environment) {
                    if (v.is_string()) {
                        launch.environment[std::string(k)] = std::string(v.as_string());
                    }
                }
                launch.cpus = parse_cpu(string_field(doc.resources, "cpu"));
                launch.memory_bytes = parse_quantity(string_field(doc.resources, "memory"));
                try {
                    launch.egress = egress_for(doc.egress_policy);  // validated at create
                } catch (const UnsupportedEgressPolicy&) {
                    launch.egress = runtime::EgressPolicy::make(Egress::closed, {});
                }
                if (launch.egress.mode == Egress::unrestricted) {
                    const auto why = runtime::egress_unavailable_reason(Egress::unrestricted);
                    if (!why.empty()) {
                        self->logger->warn(
                            "sandbox {}: defaultAction Allow cannot be enforced here ({}); it "
                            "runs without network",
                            doc.id, why);
                        launch.egress = runtime::EgressPolicy::make(Egress::closed, {});
                    }
                }
                json::object handle;
                std::string failure;
                // A launch refused for want of space is tried again (the create was accepted:
                // it converges once space returns), while the sandbox is still wanted and
                // within kLaunchRetryWindow; any other failure is final.
                const auto first_try = std::chrono::steady_clock::now();
                for (bool retrying = false;; retrying = true) {
                    bool no_space = false;
                    try {
                        auto job1 = [self, launch]() { return self->engine->launch(launch); };
                        handle = co_await self->offload(job1);
                        failure.clear();
                    } catch (const std::exception& e) {
                        failure = e.what();
                        no_space = out_of_space(e);
                    }
                    const auto wanted = self->store.sandbox(doc.id);
                    if (!no_space || !wanted || wanted->state != states::kCreating ||
                        std::chrono::steady_clock::now() - first_try > kLaunchRetryWindow) {
                        break;
                    }
                    if (!retrying) {
                        self->logger->warn(
                            "sandbox {}: no space to launch it ({}); retrying until there is",
                            doc.id, failure);
                    }
                    co_await self->sleep_ms(kLaunchRetryMs);
                }
                bool orphan = false;
                // Eventual: the sandbox now runs (or failed) whether or not the disk takes the
                // record at once; the sweep persists it when it can.
                const bool known = self->store.record(doc.id, [&](SandboxDoc& d) {
                    if (d.state == states::kDeleting) {
                        orphan = true;
                        d.handle = handle;
                        return;
                    }
                    d.handle = handle;
                    d.state = failure.empty() ? states::kRunning : states::kFailed;
                    d.failure = failure;
                    d.state_since = d.last_activity = unix_now();
                });
                if (!failure.empty()) {
                    self->logger->error("sandbox {} failed to start: {}", doc.id, failure);
                }
                if (!known || orphan) {
                    // Deleted while it was being created (even if the launch failed): finish
                    // the deletion now, once this launch no longer counts as in flight.
                    self->work.end_launch(doc.id);
                    self->spawn_delete(doc.id, handle);
                } else if (failure.empty()) {
                    self->logger->info("sandbox {} is Running", doc.id);
                }
            },
            asio::detached);
    }

    // Destroys the sandbox and forgets it. A destroy that fails leaves it Deleting for the sweep
    // to try again (kDeleteRetryAfter): forgetting it would leak its processes and files.
    void spawn_delete(const std::string& id, json::object handle = {}) {
        auto self = shared_from_this();
        if (!work.begin_delete(id)) {
            return;
        }
        asio::co_spawn(
            executor,
            [self, id, handle]() -> Task<void> {
                json::object h = handle;
                double deleting_since = unix_now();
                if (auto doc = self->store.sandbox(id)) {
                    if (h.empty()) {
                        h = doc->handle;
                    }
                    deleting_since = doc->state_since;
                }
                if (!h.empty()) {
                    try {
                        auto job2 = [self, h]() {
                            self->thaw_for_delete(h);
                            self->engine->destroy(h);
                        };
                        co_await self->offload(job2);
                    } catch (const std::exception& e) {
                        self->logger->error("deleting sandbox {}: {}; trying again shortly", id,
                                            e.what());
                        self->work.end_delete(id, kDeleteRetryAfter);
                        co_return;
                    }
                }
                // As the service does, the sandbox stays listed as Deleting for a while
                // (--deleting-ms), during which a repeated DELETE succeeds; then GET is 404.
                const double left_ms =
                    (deleting_since - unix_now()) * 1000.0 +
                    static_cast<double>(self->options.deleting_retention.count());
                if (left_ms > 0) {
                    co_await self->sleep_ms(static_cast<std::uint64_t>(left_ms));
                }
                self->store.forget(id);
                self->work.end_delete(id);
                self->logger->info("sandbox {} deleted", id);
            },
            asio::detached);
    }

    // A frozen guest (Stopped, Suspended) cannot act on the SIGTERM that ends PID 1, so the
    // runtime waited out its 5 s grace before SIGKILL, and a v1 freezer holds even SIGKILL: the
    // guest is thawed first. Under freeze_mutex, so a stop racing the delete cannot freeze it
    // again (apply_freeze skips a Deleting sandbox).
    void thaw_for_delete(const json::object& handle) {
        std::lock_guard lock(freeze_mutex);
        try {
            engine->freeze(handle, false);
        } catch (const std::exception& e) {
            logger->debug("thawing before delete: {}", e.what());  // gone or never frozen
        }
    }

    // Eventual (state_store.hpp): once accepted, a deletion converges even when the disk refuses
    // to record it now; the sweep persists it and retries a destroy that failed.
    HttpResponse delete_sandbox(const std::string& id) {
        bool already = false;
        const bool known = store.record(id, [&](SandboxDoc& d) {
            already = d.state == states::kDeleting;
            d.state = states::kDeleting;
            if (!already) {
                d.state_since = unix_now();
            }
        });
        if (!known) {
            throw not_found(id);
        }
        // A sandbox still being launched is deleted by its launch when that finishes; any
        // other is deleted now (at most one deletion runs: BackgroundWork).
        if (!work.launching(id)) {
            spawn_delete(id);
        }
        return empty_response(202);
    }

    // Brings the guest's processes in line with the recorded state: frozen while Stopped or
    // Suspended, running otherwise. Blocking; idempotent, so concurrent stop/resume converge on
    // the last recorded state.
    void apply_freeze(const std::string& id) {
        std::lock_guard lock(freeze_mutex);
        const auto doc = store.sandbox(id);
        if (!doc || doc->handle.empty() || doc->state == states::kDeleting ||
            doc->state == states::kFailed) {
            return;
        }
        const bool frozen = doc->state == states::kStopped || doc->state == states::kSuspended;
        try {
            engine->freeze(doc->handle, frozen);
        } catch (const std::exception& e) {
            logger->warn("sandbox {}: could not {} its processes ({}); the state changed anyway",
                         id, frozen ? "freeze" : "thaw", e.what());
        }
    }

    Task<void> offload_freeze(const std::string& id) {
        auto self = shared_from_this();
        auto job = [self, id]() { self->apply_freeze(id); };
        co_await offload(job);
    }

    HttpResponse stop_sandbox(const std::string& id) {
        bool running = false;
        const bool known = store.mutate(id, [&](SandboxDoc& d) {
            running = d.state == states::kRunning;
            if (running) {
                d.state = states::kStopped;
                d.stopped_reason = "UserStopped";
                d.stopped_at = iso_time(unix_now());
                d.state_since = unix_now();
            }
        });
        if (!known) {
            throw not_found(id);
        }
        if (!running) {
            throw not_running(id);
        }
        return json_response(200, require(id).to_wire(kRegion));
    }

    HttpResponse resume_sandbox(const std::string& id) {
        std::string current;
        const bool known = store.mutate(id, [&](SandboxDoc& d) {
            current = d.state;
            if (d.state == states::kStopped || d.state == states::kSuspended) {
                d.state = states::kRunning;
                d.state_since = d.last_activity = unix_now();
            }
        });
        if (!known) {
            throw not_found(id);
        }
        if (current != states::kStopped && current != states::kSuspended) {
            throw Problem{409, "InvalidSandboxState",
                          fmt::format("Sandbox must be in Stopped state to resume. Current "
                                      "state: {}",
                                      current)};
        }
        return json_response(200, require(id).to_wire(kRegion));
    }

    // The runtime's form of an egressPolicy; 400 for one it cannot enforce faithfully.
    static runtime::EgressPolicy checked_egress(const json::object& policy) {
        try {
            return egress_for(policy);
        } catch (const UnsupportedEgressPolicy& e) {
            throw Problem{400, "EgressPolicyNotSupported", e.what()};
        }
    }

    HttpResponse set_policy(const std::string& id, const HttpRequest& request, const char* field) {
        const auto body = parse_object_body(request.body, false);
        const bool lifecycle = std::string_view(field) == "lifecycle";
        // Stored and echoed by every later GET and list: checked field by field first.
        if (lifecycle) {
            refuse_unsupported_lifecycle_fields(body, "");
            check_lifecycle(body, "");
        } else {
            refuse_unsupported_egress_fields(body, "");
            check_egress_policy(body, "");
            checked_egress(body);  // validated; a running sandbox keeps its enforced policy
        }
        bool running = true;
        const bool known = store.mutate(id, [&](SandboxDoc& d) {
            if (d.state == states::kDeleting || d.state == states::kFailed) {
                running = false;
                return;
            }
            if (lifecycle) {
                d.lifecycle = body;  // POST replaces the whole policy
            } else {
                d.egress_policy = body;
            }
        });
        if (!known) {
            throw not_found(id);
        }
        if (!running) {
            throw not_running(id);
        }
        return json_response(200, body);
    }

    // Running, touched for the idle timer; otherwise 404 / 409.
    SandboxDoc require_running(const std::string& id) {
        std::optional<SandboxDoc> result;
        bool running = false;
        const bool known = store.mutate_volatile(id, [&](SandboxDoc& d) {
            running = d.state == states::kRunning;
            if (running) {
                d.last_activity = unix_now();
            }
            result = d;
        });
        if (!known) {
            throw not_found(id);
        }
        if (!running) {
            throw not_running(id);
        }
        return *result;
    }

    Task<HttpResponse> execute(const std::string& id, const HttpRequest& request) {
        const auto body = parse_object_body(request.body, false);
        // No timeout, env, user or stdin fields exist (reference 4.4): refused, not ignored.
        refuse_unknown_fields(body, {"command", "workingDirectory"},
                              "the executeShellCommand body");
        const auto* command = body.if_contains("command");
        if (command == nullptr || !command->is_string()) {
            throw Problem{400, "One or more validation errors occurred.",
                          "'command' is required and must be a string."};
        }
        if (const auto* wd = body.if_contains("workingDirectory");
            wd != nullptr && !wd->is_null() && !wd->is_string()) {
            throw Problem{400, "One or more validation errors occurred.",
                          "'workingDirectory' must be a string (an absolute path)."};
        }
        std::string cwd = string_field(body, "workingDirectory");
        if (!cwd.empty() && cwd.front() != '/') {
            throw Problem{400, "One or more validation errors occurred.",
                          "'workingDirectory' must be an absolute path."};
        }
        const auto doc = require_running(id);
        const std::string text(command->as_string());
        const auto handle = doc.handle;
        auto self = shared_from_this();
        // Not tied to the request: a client that goes away does not stop the command.
        auto job3 = [self, handle, text, cwd]() {
            return self->engine->exec(
                handle, text, cwd,
                std::chrono::duration_cast<std::chrono::milliseconds>(kExecServerTimeout),
                kExecOutputCeiling);
        };
        EngineExec result;
        try {
            result = co_await offload(job3);
        } catch (const UnusableWorkingDirectory& e) {
            // The caller's mistake, as the service would answer it: never a 5xx, which every
            // client retries (one call became four).
            throw Problem{400, "InvalidWorkingDirectory", e.what()};
        }
        const bool overflow =
            result.stdout_total > kExecOutputCeiling || result.stderr_total > kExecOutputCeiling;
        std::string out = result.stdout_head;
        std::string err = result.stderr_head;
        int exit_code = result.exit_code;
        if (overflow) {
            const std::string diagnostic = fmt::format(
                "\n[adc] output exceeded {} bytes and was truncated; process terminated",
                kExecOutputCeiling);
            (result.stdout_total > kExecOutputCeiling ? out : err) += diagnostic;
            exit_code = 137;
        }
        co_return json_response(200, json::object{{"stdout", replace_invalid_utf8(out)},
                                                  {"stderr", replace_invalid_utf8(err)},
                                                  {"exitCode", exit_code}});
    }

    Task<HttpResponse> files(const std::string& id, const HttpRequest& request, const Query& query,
                             Endpoint endpoint) {
        const auto doc = require_running(id);
        auto self = shared_from_this();
        const auto handle = doc.handle;
        auto with_plane = [self, handle](auto&& fn) {
            const auto authority = self->engine->open_authority(handle);
            FilePlane plane(authority);
            return fn(plane);
        };
        if (query.get("containerName")) {
            throw Problem{400, kFieldNotSupported,
                          "'containerName' is not implemented by acas-emulator (a sandbox has one "
                          "container); remove the query parameter"};
        }
        const auto path_param = [&]() {
            auto p = query.get("path");
            if (!p || p->empty()) {
                throw Problem{400, "One or more validation errors occurred.",
                              "The 'path' query parameter is required."};
            }
            // A relative path names what a command run from the working directory sees.
            return resolve_guest_path(*p);
        };
        if (endpoint == Endpoint::files_read) {
            const auto path = path_param();
            auto job4 = [with_plane, path]() {
                return with_plane([&](FilePlane& p) { return p.classify_read(path); });
            };
            const auto kind = co_await offload(job4);
            if (kind == ReadKind::fifo) {
                // The service never answers a FIFO read; neither do we (until shutdown).
                asio::steady_timer forever(executor, std::chrono::hours(24));
                boost::system::error_code ec;
                co_await forever.async_wait(asio::redirect_error(asio::use_awaitable, ec));
                throw Problem{503, "ServiceUnavailable", "The emulator is shutting down."};
            }
            auto job5 = [with_plane, path]() {
                return with_plane([&](FilePlane& p) { return p.read(path, kMaxFileRead); });
            };
            auto bytes = co_await offload(job5);
            HttpResponse r;
            r.headers.set("Content-Type", "application/octet-stream");
            r.body = std::move(bytes);
            co_return r;
        }
        if (endpoint == Endpoint::files_write) {
            const auto path = path_param();
            const bool create_dirs = truthy(query.get("createDirs"), true);
            std::optional<mode_t> mode;
            if (auto text = query.get("mode"); text && !text->empty()) {
                unsigned value = 0;
                auto [p, ec] = std::from_chars(text->data(), text->data() + text->size(), value, 8);
                if (ec != std::errc{} || value > 07777) {
                    throw Problem{400, "InvalidMode", "mode must be octal permission bits."};
                }
                mode = static_cast<mode_t>(value);
            }
            const auto content = request.body;
            auto job6 = [with_plane, path, content, create_dirs, mode]() {
                with_plane([&](FilePlane& p) {
                    p.write(path, content, create_dirs, mode);
                    return 0;
                });
            };
            co_await offload(job6);
            co_return json_response(200, json::object{});
        }
        if (endpoint == Endpoint::files_delete) {
            const auto path = path_param();
            const bool recursive = truthy(query.get("recursive"), false);
            auto job7 = [with_plane, path, recursive]() {
                with_plane([&](FilePlane& p) {
                    p.remove(path, recursive);
                    return 0;
                });
            };
            co_await offload(job7);
            co_return empty_response(204);
        }
        if (endpoint == Endpoint::files_stat) {
            const auto path = path_param();
            auto job8 = [with_plane, path]() {
                return with_plane([&](FilePlane& p) { return p.stat(path); });
            };
            auto entry = co_await offload(job8);
            co_return json_response(200, entry);
        }
        if (endpoint == Endpoint::files_list) {
            const auto path = path_param();
            auto job9 = [with_plane, path]() {
                return with_plane([&](FilePlane& p) { return p.list(path); });
            };
            auto listing = co_await offload(job9);
            co_return json_response(200, listing);
        }
        if (endpoint == Endpoint::files_mkdir) {
            const auto body = parse_object_body(request.body, false);
            refuse_unknown_fields(body, {"path"}, "the files/mkdir body");
            const auto given = string_field(body, "path");
            if (given.empty()) {
                throw Problem{400, "One or more validation errors occurred.",
                              "'path' is required."};
            }
            const auto path = resolve_guest_path(given);
            auto job10 = [with_plane, path]() {
                with_plane([&](FilePlane& p) {
                    p.mkdir(path);
                    return 0;
                });
            };
            co_await offload(job10);
            co_return json_response(200, json::object{});
        }
        throw Problem{404, "NotFound", "No data-plane route matches this path."};
    }

    // --- disk images --------------------------------------------------------------------------

    HttpResponse disk_images(const HttpRequest& request, const Route& route,
                             const std::string& group) {
        switch (route.endpoint) {
            case Endpoint::disk_images_list: {
                json::array value;
                for (const auto& image : store.disk_images()) {
                    if (in_group(image.group, group)) {
                        value.push_back(image.to_wire());
                    }
                }
                return json_response(200, json::object{{"value", std::move(value)}});
            }
            case Endpoint::disk_images_create:
                return create_disk_image(request, group);
            case Endpoint::public_images_list:
            case Endpoint::public_image_get: {
                const bool one = route.endpoint == Endpoint::public_image_get;
                json::array value;
                for (const auto& [name, image] : catalogue) {
                    if (one && route.image != name) {
                        continue;
                    }
                    value.push_back(json::object{
                        {"name", name},
                        {"id", name},
                        {"status", json::object{{"state", "Ready"}}},
                        {"description", fmt::format("local image '{}' (acas-emulator)", image)},
                        {"tags", json::object{}}});
                }
                if (one) {
                    if (value.empty()) {
                        throw Problem{
                            404, "DiskImageNotFound",
                            fmt::format("Public disk image '{}' was not found.", route.image)};
                    }
                    return json_response(200, value.front());
                }
                return json_response(200, json::object{{"value", std::move(value)}});
            }
            case Endpoint::disk_image_get:
            case Endpoint::disk_image_delete: {
                auto image = store.disk_image(route.image);
                if (!image || !in_group(image->group, group)) {
                    throw Problem{404, "DiskImageNotFound",
                                  fmt::format("Disk image '{}' was not found.", route.image)};
                }
                if (route.endpoint == Endpoint::disk_image_get) {
                    return json_response(200, image->to_wire());
                }
                store.erase_disk_image(route.image);
                if (!image->local_image.empty()) {
                    auto self = shared_from_this();
                    const auto local = image->local_image;
                    asio::post(pool, [self, local]() { self->engine->remove_image(local); });
                }
                return empty_response(202);
            }
            default:
                throw Problem{404, "NotFound", "No data-plane route matches this path."};
        }
    }

    HttpResponse create_disk_image(const HttpRequest& request, const std::string& group) {
        const auto body = parse_object_body(request.body, false);
        refuse_unsupported_disk_image_fields(body);
        std::string base;
        if (const auto* image = body.if_contains("image"); image != nullptr && !image->is_null()) {
            if (!image->is_object()) {
                throw Problem{400, "One or more validation errors occurred.",
                              "'image' must be an object with a 'base' reference."};
            }
            const auto* b = image->as_object().if_contains("base");
            if (b != nullptr && !b->is_null() && !b->is_string()) {
                throw Problem{400, "One or more validation errors occurred.",
                              "'image.base' must be a string."};
            }
            base = string_field(image->as_object(), "base");
        }
        if (const auto* n = body.if_contains("name");
            n != nullptr && !n->is_null() && !n->is_string()) {
            throw Problem{400, "One or more validation errors occurred.",
                          "'name' must be a string."};
        }
        if (base.empty()) {
            throw Problem{400, "One or more validation errors occurred.",
                          "'image.base' is required."};
        }
        DiskImageDoc doc;
        doc.id = new_guid();
        doc.group = group;
        doc.base = base;
        doc.labels = parse_labels(body);
        doc.name = doc.labels.count("name") ? doc.labels["name"] : std::string();
        if (doc.name.empty()) {
            doc.name = string_field(body, "name");
        }
        doc.created_at = iso_time(unix_now());
        doc.state = "Pending";
        store.put(doc);
        auto self = shared_from_this();
        asio::co_spawn(
            executor,
            [self, doc]() -> Task<void> {
                DiskImageDoc done = doc;
                const auto archive = self->registry.find(doc.base);
                if (!archive) {
                    done.state = "Failed";
                    done.message = fmt::format(
                        "failed to pull '{}': manifest unknown. The emulator's local registry "
                        "has no such reference; run `acas-emulator images add ARCHIVE --ref {}`",
                        doc.base, doc.base);
                } else {
                    std::string hex;
                    for (char c : doc.id) {
                        if (c != '-') {
                            hex.push_back(c);
                        }
                    }
                    const auto local = fmt::format("acas-img-{}:latest", hex);
                    try {
                        auto job11 = [self, archive, local]() {
                            self->engine->import_image(*archive, local);
                        };
                        co_await self->offload(job11);
                        done.state = "Ready";
                        done.local_image = local;
                    } catch (const std::exception& e) {
                        // The reason names host paths: logged, and the status says where it is.
                        self->logger->error("disk image {}: importing '{}' failed: {}", doc.id,
                                            doc.base, e.what());
                        done.state = "Failed";
                        done.message = fmt::format(
                            "failed to import '{}'; the emulator's log has the reason", doc.base);
                    }
                }
                try {
                    if (self->store.disk_image(doc.id)) {
                        self->store.put(done);
                    }
                } catch (const std::exception& e) {
                    self->logger->error("disk image {}: recording it as {} failed: {}", doc.id,
                                        done.state, e.what());
                }
                self->logger->info("disk image {} ({}) is {}", doc.id, doc.base, done.state);
            },
            asio::detached);
        return json_response(201, doc.to_wire());
    }

    // --- lifecycle timers -----------------------------------------------------------------------

    static double policy_seconds(const json::object& lifecycle, const char* policy,
                                 std::initializer_list<const char*> keys) {
        const auto* p = lifecycle.if_contains(policy);
        if (p == nullptr || !p->is_object()) {
            return 0;
        }
        const auto& o = p->as_object();
        if (const auto* enabled = o.if_contains("enabled");
            enabled != nullptr && enabled->is_bool() && !enabled->as_bool()) {
            return 0;
        }
        for (const char* key : keys) {
            if (const auto* v = o.if_contains(key); v != nullptr && v->is_number()) {
                return v->to_number<double>();
            }
        }
        return 0;
    }

    void sweep() {
        persist_pending();
        resolve_stuck();
        const double now = unix_now();
        for (const auto& doc : store.sandboxes()) {
            const double suspend =
                policy_seconds(doc.lifecycle, "autoSuspendPolicy",
                               {"interval", "idleTimeoutInSeconds", "idleTimeoutSeconds"});
            const double remove =
                policy_seconds(doc.lifecycle, "autoDeletePolicy",
                               {"deleteIntervalInSeconds", "deleteIntervalSeconds"});
            if (doc.state == states::kRunning && suspend > 0 &&
                now - doc.last_activity >= suspend) {
                store.record(doc.id, [&](SandboxDoc& d) {
                    if (d.state == states::kRunning) {
                        d.state = states::kSuspended;
                        d.stopped_reason = "Idle";
                        d.stopped_at = iso_time(now);
                        d.state_since = now;
                    }
                });
                logger->info("sandbox {} auto-suspended after {}s idle", doc.id, suspend);
                auto self = shared_from_this();
                const auto id = doc.id;
                asio::post(pool, [self, id]() { self->apply_freeze(id); });
            } else if ((doc.state == states::kStopped || doc.state == states::kSuspended) &&
                       remove > 0 && now - doc.state_since >= remove) {
                logger->info("sandbox {} auto-deleted after {}s stopped", doc.id, remove);
                delete_sandbox(doc.id);
            }
        }
    }

    // Writes what eventual changes could not (a full disk), logging only when that changes.
    void persist_pending() {
        std::string failure;
        const bool was_pending = store.pending();
        if (!store.flush(&failure)) {
            if (!state_unsaved) {
                logger->error("the emulator's state cannot be saved ({}); retrying", failure);
            }
            state_unsaved = true;
        } else if (was_pending || state_unsaved) {
            logger->info("the emulator's state is saved again");
            state_unsaved = false;
        }
    }

    // A sandbox Deleting with no deletion running (one failed, or the emulator accepted the
    // DELETE without starting one) is deleted again; one Creating with no launch running (its
    // launch ended without recording the outcome) is Running when its processes are, Failed
    // otherwise. No restart needed.
    void resolve_stuck() {
        for (const auto& doc : store.sandboxes()) {
            if (work.launching(doc.id)) {
                continue;
            }
            if (doc.state == states::kDeleting && work.may_delete(doc.id)) {
                spawn_delete(doc.id);
            } else if (doc.state == states::kCreating &&
                       unix_now() - doc.state_since > kStuckCreatingSeconds) {
                const bool alive = !doc.handle.empty() && engine->alive(doc.handle);
                logger->warn("sandbox {} was left Creating; now {}", doc.id,
                             alive ? "Running" : "Failed");
                store.record(doc.id, [&](SandboxDoc& d) {
                    if (d.state != states::kCreating) {
                        return;
                    }
                    d.state = alive ? states::kRunning : states::kFailed;
                    if (!alive) {
                        d.failure = "the sandbox's launch ended without an outcome";
                    }
                    d.state_since = d.last_activity = unix_now();
                });
            }
        }
    }

    void start_sweeper() {
        sweeper = std::make_shared<asio::steady_timer>(executor);
        auto self = shared_from_this();
        asio::co_spawn(
            executor,
            [self]() -> Task<void> {
                while (!self->stopping) {
                    self->sweeper->expires_after(std::chrono::milliseconds(500));
                    boost::system::error_code ec;
                    co_await self->sweeper->async_wait(
                        asio::redirect_error(asio::use_awaitable, ec));
                    if (self->stopping) {
                        break;
                    }
                    try {
                        self->sweep();
                    } catch (const std::exception& e) {
                        self->logger->error("lifecycle sweep failed: {}", e.what());
                    }
                }
            },
            asio::detached);
    }

    // --- metrics ------------------------------------------------------------------------------

    HttpResponse metrics_response() {
        std::string out;
        out += "# HELP acas_emulator_requests_total HTTP requests by method, route and status.\n";
        out += "# TYPE acas_emulator_requests_total counter\n";
        std::lock_guard lock(metrics.mutex);
        for (const auto& [labels, count] : metrics.requests) {
            out += fmt::format("acas_emulator_requests_total{{{}}} {}\n", labels, count);
        }
        out += "# HELP acas_emulator_request_seconds Request latency by route.\n";
        out += "# TYPE acas_emulator_request_seconds summary\n";
        for (const auto& [route, value] : metrics.latency) {
            out += fmt::format("acas_emulator_request_seconds_sum{{route=\"{}\"}} {:.6f}\n", route,
                               value.first);
            out += fmt::format("acas_emulator_request_seconds_count{{route=\"{}\"}} {}\n", route,
                               value.second);
        }
        out += "# HELP acas_emulator_sandboxes Sandboxes by state.\n";
        out += "# TYPE acas_emulator_sandboxes gauge\n";
        std::map<std::string, int> by_state;
        for (const char* s : {states::kCreating, states::kRunning, states::kStopped,
                              states::kSuspended, states::kDeleting, states::kFailed}) {
            by_state[s] = 0;
        }
        for (const auto& doc : store.sandboxes()) {
            ++by_state[doc.state];
        }
        for (const auto& [state, count] : by_state) {
            out += fmt::format("acas_emulator_sandboxes{{state=\"{}\"}} {}\n", state, count);
        }
        HttpResponse r;
        r.headers.set("Content-Type", "text/plain; version=0.0.4");
        r.body = std::move(out);
        return r;
    }
};

Emulator::Emulator(boost::asio::any_io_executor executor, EmulatorOptions options,
                   std::shared_ptr<spdlog::logger> logger)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options), std::move(logger))) {}

Emulator::~Emulator() {
    impl_->stopping = true;
    if (impl_->sweeper) {
        impl_->sweeper->cancel();
    }
}

std::uint16_t Emulator::start() {
    auto& impl = *impl_;
    net::HttpServerOptions server_options;
    server_options.host = impl.options.host;
    server_options.port = impl.options.port;
    if (!impl.options.plain_http) {
        if (impl.options.tls_cert && impl.options.tls_key) {
            server_options.tls = net::load_pem_files(*impl.options.tls_cert, *impl.options.tls_key);
        } else {
            // Kept across restarts, so clients that trust ca.pem keep working.
            const auto tls_dir = impl.options.state_dir / "tls";
            const auto cert = tls_dir / "server.pem";
            const auto key = tls_dir / "server-key.pem";
            if (std::filesystem::exists(cert) && std::filesystem::exists(key) &&
                std::filesystem::exists(impl.options.state_dir / "ca.pem")) {
                server_options.tls = net::load_pem_files(cert, key);
            } else {
                std::filesystem::create_directories(tls_dir);
                auto authority = net::generate_self_signed({"localhost"}, {"127.0.0.1"});
                net::write_file_atomically(key, authority.server.private_key_pem, 0600);
                net::write_file_atomically(cert, authority.server.certificate_chain_pem, 0644);
                net::write_file_atomically(impl.options.state_dir / "ca.pem",
                                           authority.ca_certificate_pem, 0644);
                server_options.tls = std::move(authority.server);
            }
        }
    } else {
        impl.scheme = "http";
    }
    impl.reattach();
    std::weak_ptr<Impl> weak = impl_;
    impl.server = std::make_unique<net::HttpServer>(
        impl.executor, server_options, [weak](HttpRequest request) -> Task<HttpResponse> {
            auto self = weak.lock();
            if (!self) {
                co_return HttpResponse{503, {}, "shutting down\n"};
            }
            co_return co_await self->handle(std::move(request));
        });
    impl.port = impl.server->start();
    impl.start_sweeper();
    impl.logger->info("acas-emulator {} listening on {} (state {})", impl.identity, base_url(),
                      impl.options.state_dir.string());
    return impl.port;
}

std::string Emulator::base_url() const {
    return fmt::format("{}://{}:{}", impl_->scheme, impl_->options.host, impl_->port);
}

Task<void> Emulator::stop(Seconds grace) {
    auto impl = impl_;
    impl->stopping = true;
    if (impl->sweeper) {
        impl->sweeper->cancel();
    }
    if (impl->server) {
        co_await impl->server->stop(grace);
    }
    impl->logger->info("acas-emulator stopped; sandboxes keep running");
}

}  // namespace maf_sandbox::emulator
