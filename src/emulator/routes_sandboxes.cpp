// The sandbox resource: list (label selector, pages and nextLink), create (the body checked field
// by field before the service sees it), get, delete, stop and resume.
#include <fmt/format.h>

#include <boost/json/array.hpp>
#include <boost/url/url.hpp>
#include <charconv>

#include "body_checks.hpp"
#include "field_support.hpp"
#include "request_values.hpp"
#include "routes.hpp"
#include "wire_format.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
using net::HttpResponse;

namespace {

const char* const kRegion = "local";

std::map<std::string, std::string> parse_selector(const std::optional<std::string>& labels) {
    std::map<std::string, std::string> selector;
    if (!labels || labels->empty()) {
        return selector;
    }
    std::string_view rest = *labels;
    while (!rest.empty()) {
        const auto comma = rest.find(',');
        const auto item = rest.substr(0, comma);
        const auto eq = item.find('=');
        if (eq == std::string_view::npos || eq == 0) {
            throw Refusal{400, "InvalidLabelSelector",
                          fmt::format("The label selector item '{}' must be key=value.", item)};
        }
        selector[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
        if (comma == std::string_view::npos) {
            break;
        }
        rest.remove_prefix(comma + 1);
    }
    return selector;
}

HttpResponse list_sandboxes(const RouteContext& context) {
    SandboxListing listing;
    listing.group = context.group;
    const auto labels = context.query("labels");
    listing.selector = parse_selector(labels);
    listing.page_size = context.links.default_page_size;
    if (auto ps = context.query("pageSize")) {
        std::size_t value = 0;
        auto [p, ec] = std::from_chars(ps->data(), ps->data() + ps->size(), value);
        if (ec != std::errc{} || value == 0 || value > 1000) {
            throw Refusal{400, "InvalidPageSize", "pageSize must be between 1 and 1000."};
        }
        listing.page_size = value;
    }
    if (auto token = context.query("skipToken")) {
        auto [p, ec] =
            std::from_chars(token->data(), token->data() + token->size(), listing.offset);
        if (ec != std::errc{}) {
            throw Refusal{400, "InvalidSkipToken", "The skipToken is not valid."};
        }
    }
    const auto page = context.service.list(listing);
    json::array value;
    for (const auto& doc : page.sandboxes) {
        value.push_back(doc.to_wire(kRegion));
    }
    json::object body{{"value", std::move(value)}};
    if (listing.offset + listing.page_size < page.matching) {
        const auto& links = context.links;
        boost::urls::url next;
        next.set_scheme(links.scheme);
        next.set_encoded_authority(context.request().headers.get("host").value_or(
            fmt::format("{}:{}", links.host, links.port)));
        next.set_path(context.route().group + "/sandboxes");
        next.params().append({"api-version", context.api_version});
        if (labels && !labels->empty()) {
            next.params().append({"labels", *labels});
        }
        next.params().append({"pageSize", std::to_string(listing.page_size)});
        next.params().append({"skipToken", std::to_string(listing.offset + listing.page_size)});
        body["nextLink"] = std::string(next.buffer());
    }
    return json_response(200, body);
}

// entrypoint and cmd are string arrays; anything else fails the service's model binding, which
// answers in its own shape.
void check_string_lists(const json::object& body) {
    for (const char* key : {"entrypoint", "cmd"}) {
        if (const auto* v = body.if_contains(key); v != nullptr && !v->is_null()) {
            bool ok = v->is_array();
            if (ok) {
                for (const auto& item : v->as_array()) {
                    ok = ok && item.is_string();
                }
            }
            if (!ok) {
                Refusal refusal{400, kValidationFailed, ""};
                refusal.field_errors[fmt::format("$.{}", key)] = {
                    "The JSON value could not be converted to "
                    "System.Collections.Generic.IReadOnlyList`1[System.String]."};
                throw refusal;
            }
        }
    }
}

// cpu and memory are quantities the runtime enforces: refuse one it would read as unset.
void check_resources(const json::object& body) {
    const auto* resources = body.if_contains("resources");
    if (resources == nullptr || !resources->is_object()) {
        return;  // absent; a wrong type was refused by check_create_body
    }
    const auto& r = resources->as_object();
    if (const auto* cpu = r.if_contains("cpu"); cpu != nullptr && !cpu->is_null()) {
        if (!cpu->is_string() || parse_cpu(std::string(cpu->as_string())) <= 0 ||
            parse_cpu(std::string(cpu->as_string())) > 1024) {
            throw invalid_body(
                "'resources.cpu' must be a CPU quantity string such as \"1000m\" or \"2\" (at "
                "most 1024 CPUs).");
        }
    }
    if (const auto* memory = r.if_contains("memory"); memory != nullptr && !memory->is_null()) {
        if (!memory->is_string() || parse_quantity(std::string(memory->as_string())) == 0) {
            throw invalid_body(
                "'resources.memory' must be a memory quantity string such as \"2048Mi\" or "
                "\"2Gi\".");
        }
    }
}

// The diskImage sourcesRef names; the service resolves it.
void read_source(const json::object& body, NewSandbox& request) {
    const auto* sources = body.if_contains("sourcesRef");
    if (sources == nullptr || !sources->is_object()) {
        if (body.contains("presetSandboxType")) {
            throw Refusal{400, "PresetNotSupported",
                          "The emulator has no preset sandbox types; pass sourcesRef."};
        }
        throw invalid_body("'sourcesRef' is required when not using a preset sandbox type");
    }
    const auto& s = sources->as_object();
    if (s.contains("snapshot")) {
        throw Refusal{400, "SnapshotNotSupported", "The emulator does not support snapshots."};
    }
    const auto* disk = s.if_contains("diskImage");
    if (disk == nullptr || !disk->is_object()) {
        throw invalid_body("'sourcesRef.diskImage' must be an object.");
    }
    request.sources_ref = s;
    request.disk_image_id = string_field(disk->as_object(), "id");
    request.disk_image_name = string_field(disk->as_object(), "name");
}

std::optional<json::object> object_field(const json::object& body, const char* key) {
    if (const auto* v = body.if_contains(key); v != nullptr && v->is_object()) {
        return v->as_object();
    }
    return std::nullopt;
}

HttpResponse create_sandbox(const RouteContext& context) {
    const auto body = parse_object_body(context.request().body, false);
    NewSandbox request;
    request.group = context.group;
    request.labels = parse_labels(body);
    check_string_lists(body);
    refuse_unsupported_create_fields(body);
    check_create_body(body);
    check_resources(body);
    read_source(body, request);
    request.resources = object_field(body, "resources").value_or(json::object{});
    request.egress_policy = object_field(body, "egressPolicy");
    request.lifecycle = object_field(body, "lifecycle");
    request.environment = object_field(body, "environment");
    return json_response(201, context.service.create(request).to_wire(kRegion));
}

}  // namespace

Task<HttpResponse> serve_sandboxes(const RouteContext& context) {
    auto& service = context.service;
    switch (context.route().endpoint) {
        case Endpoint::sandboxes_list:
            co_return list_sandboxes(context);
        case Endpoint::sandboxes_create:
            co_return create_sandbox(context);
        case Endpoint::sandbox_get:
            co_return json_response(200, service.get(context.id()).to_wire(kRegion));
        case Endpoint::sandbox_delete:
            service.remove(context.id());
            co_return empty_response(202);
        case Endpoint::sandbox_stop:
            co_return json_response(200,
                                    (co_await service.stop_sandbox(context.id())).to_wire(kRegion));
        case Endpoint::sandbox_resume:
            co_return json_response(
                200, (co_await service.resume_sandbox(context.id())).to_wire(kRegion));
        default:
            throw no_such_route();
    }
}

}  // namespace maf_sandbox::emulator
