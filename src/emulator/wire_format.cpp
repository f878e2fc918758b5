#include "wire_format.hpp"

#include <fmt/format.h>

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "maf_sandbox/core/utf8.hpp"
#include "state_store.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
using net::HttpResponse;

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

HttpResponse problem_response(const Refusal& refusal) {
    HttpResponse r;
    r.status = refusal.status;
    r.headers.set("Content-Type", "application/problem+json");
    if (refusal.retry_after_s > 0) {
        r.headers.set("Retry-After", std::to_string(refusal.retry_after_s));
    }
    if (!refusal.field_errors.empty()) {
        json::object errors;
        for (const auto& [field, messages] : refusal.field_errors) {
            json::array list;
            for (const auto& message : messages) {
                list.emplace_back(replace_invalid_utf8(message));
            }
            errors[replace_invalid_utf8(field)] = std::move(list);
        }
        r.body = json::serialize(json::object{{"title", replace_invalid_utf8(refusal.code)},
                                              {"status", refusal.status},
                                              {"errors", std::move(errors)}});
        return r;
    }
    // Details quote request text (paths, ids, image names), which may not be UTF-8: a JSON
    // string must be, so invalid sequences become U+FFFD.
    const auto& detail = refusal.message;
    json::object body{
        {"title", replace_invalid_utf8(refusal.code)},
        {"status", refusal.status},
        {"detail",
         replace_invalid_utf8(detail.size() > 1024 ? detail.substr(0, 1024) + "..." : detail)}};
    body["errorCode"] = refusal.error_code != 0 ? refusal.error_code : refusal.status;
    r.body = json::serialize(body);
    return r;
}

json::object parse_object_body(const std::string& body, bool allow_empty) {
    if (body.empty() && allow_empty) {
        return {};
    }
    boost::system::error_code ec;
    auto value = json::parse(body, ec);
    if (ec || !value.is_object()) {
        throw invalid_body("The request body must be a JSON object.");
    }
    return value.as_object();
}

Handler with_refusals(Handler inner, std::shared_ptr<spdlog::logger> logger) {
    return [inner = std::move(inner), logger](const Exchange& exchange) -> Task<HttpResponse> {
        const std::string_view route_label = route_name(exchange.route.endpoint);
        try {
            co_return co_await inner(exchange);
        } catch (const Refusal& refusal) {
            co_return problem_response(refusal);
        } catch (const StateRecordTooLarge& e) {
            co_return problem_response(Refusal{413, "RequestEntityTooLarge", e.what()});
        } catch (const StateNotPersisted& e) {
            // The change was undone (state_store.hpp): a client may retry. The detail names the
            // state file, a host path: it goes to the log only.
            logger->error("request {} {} failed: {}", exchange.request_id, route_label, e.detail());
            co_return problem_response(
                Refusal{e.no_space() ? 507 : 500,
                        e.no_space() ? "InsufficientStorage" : "InternalServerError", e.what()});
        } catch (const std::exception& e) {
            // Runtime and system errors name host paths: the log has them, the client a fixed
            // sentence it can quote back.
            logger->error("request {} {} failed: {}", exchange.request_id, route_label, e.what());
            co_return problem_response(
                Refusal{500, "InternalServerError",
                        fmt::format("The emulator failed to complete the request; its log has the "
                                    "reason under request id {}.",
                                    exchange.request_id)});
        }
    };
}

}  // namespace maf_sandbox::emulator
