#include "maf_sandbox/acas/client.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <ctime>
#include <mutex>

#include "client_impl.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/core/error_context.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/net/http_client.hpp"

namespace maf_sandbox::acas {

namespace asio = boost::asio;

Deadline deadline_after(Seconds budget) {
    return SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(budget);
}

void require_path_segment(std::string_view value, std::string_view what) {
    if (value.empty() || value.find('/') != std::string_view::npos ||
        value.find('\\') != std::string_view::npos || value.find("..") != std::string_view::npos ||
        value.find('\0') != std::string_view::npos) {
        throw InvalidArgument(fmt::format(
            "{} must be non-empty and must not contain '/', '\\', '..' or NUL; fix the value",
            what));
    }
}

namespace detail {

std::string new_request_id() {
    return random_uuid4();
}

std::optional<Seconds> retry_after_of(const net::HttpResponse& response) {
    for (const char* name : {"retry-after-ms", "x-ms-retry-after-ms"}) {
        if (const auto value = response.headers.get(name)) {
            try {
                return Seconds(std::stod(*value) / 1000.0);
            } catch (const std::exception&) {
            }
        }
    }
    if (const auto value = response.headers.get("Retry-After")) {
        try {
            std::size_t used = 0;
            const double seconds = std::stod(*value, &used);
            if (used == value->size() && seconds >= 0) {
                return Seconds(seconds);
            }
        } catch (const std::exception&) {
        }
        std::tm tm{};
        if (::strptime(value->c_str(), "%a, %d %b %Y %H:%M:%S", &tm) != nullptr) {
            const auto when = std::chrono::system_clock::from_time_t(::timegm(&tm));
            const auto delta = when - std::chrono::system_clock::now();
            return Seconds(std::max(0.0, std::chrono::duration<double>(delta).count()));
        }
    }
    return std::nullopt;
}

bool is_retryable_status(int status) {
    return status == 408 || status == 429 || (status >= 500 && status != 501 && status != 505);
}

std::string problem_code(const std::string& body) {
    boost::system::error_code error;
    auto value = boost::json::parse(body, error);
    if (error || !value.is_object())
        return {};
    const auto& object = value.as_object();
    if (const auto* title = object.if_contains("title"); title && title->is_string()) {
        return std::string(title->as_string());
    }
    if (const auto* e = object.if_contains("error"); e && e->is_object()) {
        if (const auto* code = e->as_object().if_contains("code"); code && code->is_string()) {
            return std::string(code->as_string());
        }
    }
    return {};
}

std::string problem_detail(const std::string& body) {
    boost::system::error_code error;
    auto value = boost::json::parse(body, error);
    if (error || !value.is_object())
        return {};
    const auto& object = value.as_object();
    const boost::json::value* text = object.if_contains("detail");
    if (const auto* e = object.if_contains("error"); !text && e && e->is_object()) {
        text = e->as_object().if_contains("message");
    }
    if (text == nullptr || !text->is_string())
        return {};
    // Quoted into an error a person reads and logs: printable, short, and with any long word
    // (what an echoed token or key would be) left out.
    std::string shown, word;
    const auto flush = [&] {
        shown += word.size() > 64 ? "[...]" : word;
        word.clear();
    };
    for (const char c : std::string_view(text->as_string()).substr(0, 300)) {
        if (c == ' ') {
            flush();
            shown.push_back(' ');
        } else {
            word.push_back(c >= 0x20 && c < 0x7f ? c : '?');
        }
    }
    flush();
    return shown;
}

}  // namespace detail

AcasClient::Impl::Impl(asio::any_io_executor ex, AcasClientOptions o)
    : executor(ex), options(std::move(o)) {
    if (!options.log) {
        options.log = std::make_shared<spdlog::logger>(
            "acas", std::make_shared<spdlog::sinks::null_sink_mt>());
    }
    if (!options.credential) {
        throw InvalidArgument("the ACAS client needs a credential");
    }
    const auto parsed = net::parse_http_url(options.endpoint);
    if (!parsed.is_https()) {
        throw InvalidArgument("the ACAS endpoint must be an https URL; fix --endpoint");
    }
    if (!options.endpoint.empty() && options.endpoint.back() == '/') {
        throw InvalidArgument("the ACAS endpoint must not end with '/'; drop the trailing slash");
    }
    endpoint_host = parsed.host;
    endpoint_port = parsed.port;
    require_path_segment(options.subscription_id, "the subscription id");
    require_path_segment(options.resource_group, "the resource group");
    require_path_segment(options.sandbox_group, "the sandbox group");
    group_path =
        fmt::format("/subscriptions/{}/resourceGroups/{}/sandboxGroups/{}", options.subscription_id,
                    options.resource_group, options.sandbox_group);
    net::HttpClientOptions http_options;
    http_options.ca_file = options.ca_file;
    http_options.user_agent = std::string(kUserAgent);
    http_options.default_max_response_bytes = 64 * kMiB;
    http = std::make_unique<net::HttpClient>(executor, std::move(http_options));
}

AcasClient::Impl::~Impl() = default;

void AcasClient::Impl::observe_emulator_header(const net::HttpResponse& response) {
    const auto header = response.headers.get(kEmulatorHeader);
    if (!options.emulator) {
        if (header) {
            throw AcasEmulatorMismatch(
                "the ACAS endpoint answered as an acas-emulator while emulator mode is off; "
                "refusing to declare microvm for it: pass --emulator or point --endpoint at the "
                "real service");
        }
        return;
    }
    if (!header) {
        return;
    }
    const auto at = header->find("isolation=");
    if (at == std::string::npos) {
        throw AcasEmulatorMismatch(
            "the acas-emulator's header names no isolation rung; upgrade the emulator");
    }
    auto rung_text = header->substr(at + std::string_view("isolation=").size());
    if (const auto end = rung_text.find_first_of("; ,"); end != std::string::npos) {
        rung_text.resize(end);
    }
    const auto rung = parse_isolation(rung_text);
    std::lock_guard lock(mutex);
    rung_seen = rung;
}

std::string AcasClient::Impl::describe_request(const std::string& method,
                                               const std::string& url) const {
    std::string_view path = url;
    if (path.starts_with(options.endpoint))
        path.remove_prefix(options.endpoint.size());
    if (const auto at = path.find(group_path); at != std::string_view::npos)
        path.remove_prefix(at + group_path.size());
    else
        path = "/";  // a page link elsewhere on the service: only its method is named
    path = path.substr(0, path.find('?'));
    return fmt::format("{} {}", method, path.empty() ? "/" : path);
}

Task<net::HttpResponse> AcasClient::Impl::send(std::string method, std::string url,
                                               std::string body, std::string content_type,
                                               Replay replay, Deadline deadline,
                                               std::size_t max_response_bytes) {
    auto doing = describe_request(method, url);
    co_return co_await with_context(
        std::move(doing),
        send_with_retries(std::move(method), std::move(url), std::move(body),
                          std::move(content_type), replay, deadline, max_response_bytes));
}

Task<net::HttpResponse> AcasClient::Impl::send_with_retries(std::string method, std::string url,
                                                            std::string body,
                                                            std::string content_type, Replay replay,
                                                            Deadline deadline,
                                                            std::size_t max_response_bytes) {
    const std::string request_id = detail::new_request_id();
    int attempt = 0;
    std::optional<SteadyClock::time_point> forbidden_since;
    asio::steady_timer timer(executor);
    const auto wait = [&](Seconds how_long) -> Task<void> {
        timer.expires_after(std::chrono::duration_cast<SteadyClock::duration>(how_long));
        co_await timer.async_wait(asio::use_awaitable);
    };
    const auto backoff = [&]() {
        const double base = options.retry.initial_backoff.count() * std::pow(2.0, attempt - 1);
        return Seconds(std::min(base, options.retry.max_backoff.count()));
    };
    const auto remaining = [&]() {
        return std::chrono::duration<double>(deadline - SteadyClock::now());
    };
    for (;;) {
        ++attempt;
        if (remaining().count() <= 0) {
            throw Timeout(
                fmt::format("the ACAS request {} did not finish before its deadline", method));
        }
        std::vector<std::string> scopes(1, std::string(azure::kDataPlaneScope));
        auto token = co_await options.credential->get_token(std::move(scopes));
        net::HttpRequest request;
        request.method = method;
        request.target = url;
        request.headers.set("Authorization", "Bearer " + token.token);
        request.headers.set("x-ms-client-request-id", request_id);
        request.headers.set("User-Agent", std::string(kUserAgent));
        request.headers.set("Accept", "application/json");
        request.headers.set("Accept-Encoding", "identity");
        if (!content_type.empty()) {
            request.headers.set("Content-Type", content_type);
        }
        request.body = body;
        {
            std::lock_guard lock(mutex);
            ++stats.requests;
            if (attempt > 1)
                ++stats.retries;
        }
        net::HttpResponse response;
        std::optional<std::string> transport_failure;
        bool sent = false;
        try {
            response = co_await http->send(
                std::move(request),
                net::RequestOptions{Seconds(std::max(0.001, remaining().count())),
                                    max_response_bytes});
        } catch (const net::ResponseTooLarge& e) {
            throw AcasServiceError(
                fmt::format("the ACAS answer to {} exceeded {} bytes; it was dropped", method,
                            max_response_bytes),
                0, "ResponseTooLarge");
        } catch (const net::DeadlineExceeded& e) {
            if (replay == Replay::exec && e.request_sent()) {
                throw AcasRequestOutcomeUnknown(
                    "the exec request was sent and its deadline expired before an answer");
            }
            throw Timeout(
                fmt::format("the ACAS request {} did not finish before its deadline", method));
        } catch (const net::TlsVerificationFailed& e) {
            // A certificate does not become trusted by asking again: no retry, and the fix.
            throw AcasServiceUnreachable(fmt::format(
                "the ACAS endpoint's TLS certificate was not accepted: {}. Not retried. If the "
                "endpoint is an acas-emulator or uses a private CA, trust its CA certificate with "
                "--ca-file FILE (ACAS_SANDBOX_CA_FILE, AcasSandboxConfig::ca_file)",
                e.problem()));
        } catch (const net::NetError& e) {
            transport_failure = e.what();
            sent = e.request_sent();
        }
        if (transport_failure) {
            options.log->debug("ACAS {} attempt {} failed in transport: {}", method, attempt,
                               *transport_failure);
            const bool replayable = !sent || replay == Replay::idempotent;
            if (!replayable) {
                if (replay == Replay::exec) {
                    throw AcasRequestOutcomeUnknown(
                        "the exec request was sent and the connection failed before an answer; "
                        "it is not re-sent");
                }
                throw AcasServiceUnreachable(
                    fmt::format("the ACAS request {} was sent and its connection failed; whether "
                                "it took effect is unknown",
                                method));
            }
            if (attempt >= options.retry.max_attempts || backoff() >= remaining()) {
                throw AcasServiceUnreachable(fmt::format(
                    "the ACAS service could not be reached after {} attempts; check the endpoint "
                    "and the network",
                    attempt));
            }
            co_await wait(backoff());
            continue;
        }
        observe_emulator_header(response);
        const int status = response.status;
        if (status < 400) {
            co_return response;
        }
        const auto retry_after = detail::retry_after_of(response);
        const auto code = detail::problem_code(response.body);
        options.log->debug("ACAS {} {} answered {} {} (attempt {})", method, url, status, code,
                           attempt);
        if (status == 401) {
            // The service's reason (audience, tenant, expiry) is what a person can act on.
            const auto detail = detail::problem_detail(response.body);
            throw AcasAuthorizationError(
                fmt::format("the ACAS service refused the token (HTTP 401{}{}); check the "
                            "credential's audience (https://dynamicsessions.io/.default), tenant "
                            "and expiry",
                            detail.empty() ? "" : ": ", detail),
                status, code);
        }
        if (status == 403) {
            if (!forbidden_since)
                forbidden_since = SteadyClock::now();
            const auto waited =
                std::chrono::duration<double>(SteadyClock::now() - *forbidden_since);
            const auto pause = retry_after.value_or(backoff());
            if (waited + pause < options.retry.forbidden_window && pause < remaining() &&
                attempt < options.retry.max_attempts) {
                co_await wait(pause);
                continue;
            }
            throw AcasAuthorizationError(
                "the ACAS service denied access (HTTP 403); grant the principal the 'Container "
                "Apps SandboxGroup Data Owner' role on the group and allow for propagation",
                status, code);
        }
        if (status == 429 && retry_after) {
            // Waited out for any request: the service answered, nothing is in flight.
            if (*retry_after >= remaining()) {
                throw AcasThrottled(
                    "the ACAS service throttled the request (HTTP 429) past its deadline; nothing "
                    "was in flight, retry later");
            }
            if (attempt < options.retry.max_attempts || replay != Replay::idempotent) {
                co_await wait(*retry_after);
                continue;
            }
        }
        if (detail::is_retryable_status(status)) {
            if (replay == Replay::exec) {
                throw AcasRequestOutcomeUnknown(fmt::format(
                    "the exec request got HTTP {}; whether it ran is unknown, so it is not "
                    "re-sent",
                    status));
            }
            if (replay == Replay::idempotent && attempt < options.retry.max_attempts) {
                const auto pause = std::max(retry_after.value_or(Seconds{0}), backoff());
                if (pause < remaining()) {
                    co_await wait(pause);
                    continue;
                }
            }
            throw AcasServiceError(
                fmt::format(
                    "the ACAS service kept failing (HTTP {}) after {} attempts; retry later",
                    status, attempt),
                status, code);
        }
        co_return response;
    }
}

AcasClient::AcasClient(asio::any_io_executor executor, AcasClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

AcasClient::~AcasClient() = default;

std::optional<Isolation> AcasClient::emulator_rung() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->rung_seen;
}

AcasClientStats AcasClient::stats() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->stats;
}

void AcasClient::close() {
    impl_->http->close_idle();
}

std::string AcasClient::url(std::string_view path, std::string_view query) const {
    std::string out = impl_->options.endpoint + impl_->group_path + std::string(path) +
                      "?api-version=" + std::string(kApiVersion);
    if (!query.empty()) {
        out += "&";
        out += query;
    }
    return out;
}

}  // namespace maf_sandbox::acas
