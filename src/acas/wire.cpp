#include "wire.hpp"

#include <fmt/format.h>

#include <limits>

#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/net/http.hpp"

namespace maf_sandbox::acas::wire {

namespace json = boost::json;

namespace {

std::string string_field(const json::object& object, std::string_view key) {
    if (const auto* v = object.if_contains(key); v && v->is_string())
        return std::string(v->as_string());
    return {};
}

[[noreturn]] void malformed(std::string_view what) {
    throw AcasServiceError(fmt::format("the ACAS answer is malformed: {}", what), 0,
                           "MalformedAnswer");
}

}  // namespace

json::object egress_policy(const std::vector<std::string>& allow_hosts) {
    // Deny with Full inspection is what makes "closed" mean no network at all.
    json::object policy{{"defaultAction", "Deny"}, {"trafficInspection", "Full"}};
    if (!allow_hosts.empty()) {
        json::array rules;
        for (const auto& host : allow_hosts) {
            rules.push_back(json::object{{"pattern", host}, {"action", "Allow"}});
        }
        policy["hostRules"] = std::move(rules);
    }
    return policy;
}

json::object create_body(const CreateSandboxRequest& request) {
    json::object disk;
    if (request.prebuilt_name) {
        disk = json::object{{"name", *request.prebuilt_name}, {"isPublic", true}};
    } else if (request.disk_image_id) {
        disk = json::object{{"id", *request.disk_image_id}};
    } else {
        throw InvalidArgument("a sandbox create needs a prebuilt image name or a disk image id");
    }
    json::object body{
        {"sourcesRef", json::object{{"diskImage", std::move(disk)}}},
        {"resources", json::object{{"cpu", request.cpu}, {"memory", request.memory}}},
        {"lifecycle",
         json::object{{"autoSuspendPolicy", json::object{{"enabled", true},
                                                         {"interval", request.auto_suspend_seconds},
                                                         {"mode", "Memory"}}}}},
        {"egressPolicy", egress_policy(request.allow_hosts)},
    };
    if (!request.labels.empty()) {
        json::object labels;
        for (const auto& [key, value] : request.labels)
            labels[key] = value;
        body["labels"] = std::move(labels);
    }
    return body;
}

json::object lifecycle_body(const LifecyclePolicy& policy) {
    return json::object{
        {"autoSuspendPolicy",
         json::object{
             {"enabled", true}, {"interval", policy.auto_suspend_seconds}, {"mode", "Memory"}}},
        {"autoDeletePolicy",
         json::object{{"enabled", true}, {"deleteIntervalInSeconds", policy.auto_delete_seconds}}},
    };
}

SandboxInfo parse_sandbox(const json::value& value) {
    if (!value.is_object())
        malformed("a sandbox is not an object");
    const auto& object = value.as_object();
    SandboxInfo info;
    info.id = string_field(object, "id");
    info.state = string_field(object, "state");
    info.created_at = string_field(object, "createdAt");
    if (const auto* details = object.if_contains("stateDetails"); details && details->is_object()) {
        info.stopped_reason = string_field(details->as_object(), "stoppedReason");
    }
    if (const auto* labels = object.if_contains("labels"); labels && labels->is_object()) {
        for (const auto& [key, v] : labels->as_object()) {
            if (v.is_string())
                info.labels[std::string(key)] = std::string(v.as_string());
        }
    }
    if (const auto* sources = object.if_contains("sourcesRef"); sources && sources->is_object()) {
        if (const auto* disk = sources->as_object().if_contains("diskImage");
            disk && disk->is_object()) {
            if (auto id = string_field(disk->as_object(), "id"); !id.empty()) {
                info.source_disk_image_id = std::move(id);
            } else if (auto name = string_field(disk->as_object(), "name"); !name.empty()) {
                info.source_name = std::move(name);
            }
        }
    }
    info.egress_default_action = "Allow";
    if (const auto* policy = object.if_contains("egressPolicy"); policy && policy->is_object()) {
        const auto& p = policy->as_object();
        if (auto action = string_field(p, "defaultAction"); !action.empty()) {
            info.egress_default_action = action;
        }
        if (const auto* rules = p.if_contains("hostRules"); rules && rules->is_array()) {
            for (const auto& rule : rules->as_array()) {
                if (!rule.is_object())
                    continue;
                const auto& r = rule.as_object();
                if (net::iequals(string_field(r, "action"), "Allow")) {
                    info.egress_hosts.push_back(string_field(r, "pattern"));
                }
            }
        }
    }
    return info;
}

ExecAnswer parse_exec_answer(const json::value& value) {
    if (!value.is_object())
        malformed("an exec answer is not an object");
    const auto& object = value.as_object();
    ExecAnswer answer;
    const auto text = [&](std::string_view key) -> std::string {
        const auto* v = object.if_contains(key);
        if (v == nullptr || v->is_null())
            return {};
        if (!v->is_string())
            malformed(fmt::format("exec {} is not a string", key));
        return std::string(v->as_string());
    };
    answer.stdout_text = text("stdout");
    answer.stderr_text = text("stderr");
    if (const auto* code = object.if_contains("exitCode"); code && !code->is_null()) {
        if (!code->is_int64())
            malformed("exec exitCode is not an integer");
        // A wider value would wrap (4294967296 would read as 0, a success): refuse it instead.
        const auto wide = code->as_int64();
        if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max())
            malformed(fmt::format("exec exitCode {} is out of range", wide));
        answer.exit_code = static_cast<int>(wide);
    }
    return answer;
}

DiskImageInfo parse_disk_image(const json::value& value) {
    if (!value.is_object())
        malformed("a disk image is not an object");
    const auto& object = value.as_object();
    DiskImageInfo info;
    info.id = string_field(object, "id");
    info.name = string_field(object, "name");
    if (const auto* image = object.if_contains("image")) {
        if (image->is_object()) {
            info.base = string_field(image->as_object(), "base");
        } else if (image->is_string()) {
            info.base = std::string(image->as_string());
        }
    }
    if (const auto* labels = object.if_contains("labels");
        labels && labels->is_object() && info.name.empty()) {
        info.name = string_field(labels->as_object(), "name");
    }
    if (const auto* status = object.if_contains("status"); status && status->is_object()) {
        info.state = string_field(status->as_object(), "state");
    }
    return info;
}

Page parse_page(const json::value& value) {
    Page page;
    if (value.is_array()) {
        page.items = value.as_array();
        return page;
    }
    if (!value.is_object())
        malformed("a listing is neither an array nor an object");
    const auto& object = value.as_object();
    const auto* items = object.if_contains("value");
    if (items == nullptr || !items->is_array())
        malformed("a listing has no value array");
    page.items = items->as_array();
    page.next_link = string_field(object, "nextLink");
    return page;
}

void require_same_origin(std::string_view link, std::string_view host, std::uint16_t port) {
    net::ParsedUrl parsed;
    try {
        parsed = net::parse_http_url(link);
    } catch (const InvalidArgument&) {
        throw AcasServiceError("the ACAS listing's nextLink is not a URL; refusing to follow it", 0,
                               "NextLinkRefused");
    }
    if (!parsed.is_https() || !net::iequals(parsed.host, host) || parsed.port != port) {
        throw AcasServiceError(
            "the ACAS listing's nextLink leaves the endpoint (another host or not https); "
            "refusing to follow it",
            0, "NextLinkRefused");
    }
}

RawEntry parse_entry(const json::value& value) {
    if (!value.is_object()) {
        throw AcasEntryPayloadIncomplete(
            "an ACAS file entry is not an object; it cannot be classified");
    }
    const auto& object = value.as_object();
    const auto* is_dir = object.if_contains("isDir");
    const auto* is_link = object.if_contains("isSymlink");
    if (is_dir == nullptr || is_link == nullptr || !is_dir->is_bool() || !is_link->is_bool()) {
        throw AcasEntryPayloadIncomplete(
            "an ACAS file entry lacks boolean isDir and isSymlink; refusing to assume it is a "
            "regular file");
    }
    RawEntry entry;
    entry.path = string_field(object, "path");
    entry.kind = is_link->as_bool()  ? EntryKind::symlink
                 : is_dir->as_bool() ? EntryKind::directory
                                     : EntryKind::file;
    if (entry.kind == EntryKind::file) {
        if (const auto* size = object.if_contains("size")) {
            if (size->is_int64() && size->as_int64() >= 0) {
                entry.size = static_cast<std::uint64_t>(size->as_int64());
            } else if (size->is_uint64()) {
                entry.size = size->as_uint64();
            }
        }
    }
    return entry;
}

}  // namespace maf_sandbox::acas::wire
