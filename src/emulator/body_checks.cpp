#include "body_checks.hpp"

#include <fmt/format.h>

#include <array>
#include <boost/json/array.hpp>
#include <cmath>
#include <string_view>

#include "maf_sandbox/core/utf8.hpp"
#include "refusal.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
namespace {

std::string join(const std::string& field, std::string_view key) {
    return field.empty() ? std::string(key) : fmt::format("{}.{}", field, key);
}

std::string shown(const std::string& field) {
    // Keys come from the request: keep the message short and valid UTF-8.
    return replace_invalid_utf8(field.size() > 200 ? field.substr(0, 200) + "..." : field);
}

[[noreturn]] void refuse(const std::string& field, std::string_view what) {
    throw Refusal{400, kValidationFailed,
                  fmt::format("'{}' {}.", shown(field.empty() ? "$" : field), what)};
}

const json::value* present(const json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    return v == nullptr || v->is_null() ? nullptr : v;
}

const json::object& require_object(const json::value& v, const std::string& field) {
    if (!v.is_object()) {
        refuse(field, "must be an object");
    }
    return v.as_object();
}

void optional_string(const json::object& o, const std::string& field, std::string_view key) {
    if (const auto* v = present(o, key); v != nullptr && !v->is_string()) {
        refuse(join(field, key), "must be a string");
    }
}

void optional_bool(const json::object& o, const std::string& field, std::string_view key) {
    if (const auto* v = present(o, key); v != nullptr && !v->is_bool()) {
        refuse(join(field, key), "must be true or false");
    }
}

// A string field that must be one of `allowed` (compared case-insensitively, as egress_for does).
template <std::size_t N>
void optional_choice(const json::object& o, const std::string& field, std::string_view key,
                     const std::array<std::string_view, N>& allowed) {
    const auto* v = present(o, key);
    if (v == nullptr) {
        return;
    }
    std::string list;
    for (const auto a : allowed) {
        list += list.empty() ? std::string(a) : fmt::format(", {}", a);
    }
    if (!v->is_string()) {
        refuse(join(field, key), fmt::format("must be a string, one of {}", list));
    }
    const std::string_view text = v->as_string();
    for (const auto a : allowed) {
        if (a.size() == text.size() &&
            std::equal(a.begin(), a.end(), text.begin(), [](char x, char y) {
                return std::tolower(static_cast<unsigned char>(x)) ==
                       std::tolower(static_cast<unsigned char>(y));
            })) {
            return;
        }
    }
    refuse(join(field, key), fmt::format("must be one of {}", list));
}

void optional_seconds(const json::object& o, const std::string& field, std::string_view key) {
    const auto* v = present(o, key);
    if (v == nullptr) {
        return;
    }
    if (!v->is_number()) {
        refuse(join(field, key), "must be a number of seconds");
    }
    const double seconds = v->to_number<double>();
    if (!std::isfinite(seconds) || seconds < 0 || seconds > kMaxPolicySeconds) {
        refuse(join(field, key),
               fmt::format("must be between 0 and {:.0f} seconds", kMaxPolicySeconds));
    }
}

std::string indexed(const std::string& field, std::string_view key, std::size_t i) {
    return fmt::format("{}[{}]", join(field, key), i);
}

void check_rule(const json::value& v, const std::string& field) {
    const auto& rule = require_object(v, field);
    optional_string(rule, field, "name");
    const auto* match = present(rule, "match");
    if (match == nullptr) {
        refuse(join(field, "match"), "is required");
    }
    const auto match_field = join(field, "match");
    const auto& m = require_object(*match, match_field);
    optional_string(m, match_field, "host");
    optional_string(m, match_field, "path");
    if (const auto* methods = present(m, "methods")) {
        if (!methods->is_array()) {
            refuse(join(match_field, "methods"), "must be an array of strings");
        }
        for (std::size_t i = 0; i < methods->as_array().size(); ++i) {
            if (!methods->as_array()[i].is_string()) {
                refuse(indexed(match_field, "methods", i), "must be a string");
            }
        }
    }
    const auto* action = present(rule, "action");
    if (action == nullptr) {
        refuse(join(field, "action"), "is required");
    }
    const auto action_field = join(field, "action");
    const auto& a = require_object(*action, action_field);
    optional_choice(a, action_field, "type",
                    std::array<std::string_view, 4>{"Allow", "Deny", "Transform", "Rewrite"});
    if (present(a, "type") == nullptr) {
        refuse(join(action_field, "type"), "is required");
    }
    for (const char* key : {"host", "path", "scheme"}) {
        optional_string(a, action_field, key);
    }
    if (const auto* headers = present(a, "headers")) {
        if (!headers->is_array()) {
            refuse(join(action_field, "headers"), "must be an array of objects");
        }
        for (std::size_t i = 0; i < headers->as_array().size(); ++i) {
            require_object(headers->as_array()[i], indexed(action_field, "headers", i));
        }
    }
}

}  // namespace

void check_finite(const json::value& value, const std::string& field) {
    switch (value.kind()) {
        case json::kind::double_:
            if (!std::isfinite(value.get_double())) {
                refuse(field, "must be a finite number");
            }
            return;
        case json::kind::array: {
            const auto& a = value.get_array();
            for (std::size_t i = 0; i < a.size(); ++i) {
                check_finite(a[i], fmt::format("{}[{}]", field.empty() ? "$" : field, i));
            }
            return;
        }
        case json::kind::object:
            for (const auto& [key, v] : value.get_object()) {
                check_finite(v, join(field, key));
            }
            return;
        default:
            return;
    }
}

void check_egress_policy(const json::value& policy, const std::string& field) {
    const auto& p = require_object(policy, field.empty() ? std::string("$") : field);
    check_finite(policy, field);
    optional_choice(p, field, "defaultAction", std::array<std::string_view, 2>{"Allow", "Deny"});
    optional_choice(p, field, "trafficInspection",
                    std::array<std::string_view, 4>{"Legacy", "Full", "Partial", "None"});
    if (const auto* rules = present(p, "hostRules")) {
        if (!rules->is_array()) {
            refuse(join(field, "hostRules"), "must be an array of {pattern, action} objects");
        }
        for (std::size_t i = 0; i < rules->as_array().size(); ++i) {
            const auto rule_field = indexed(field, "hostRules", i);
            const auto& rule = require_object(rules->as_array()[i], rule_field);
            const auto* pattern = present(rule, "pattern");
            if (pattern == nullptr || !pattern->is_string() || pattern->as_string().empty()) {
                refuse(join(rule_field, "pattern"), "must be a non-empty string");
            }
            optional_choice(rule, rule_field, "action",
                            std::array<std::string_view, 2>{"Allow", "Deny"});
            if (present(rule, "action") == nullptr) {
                refuse(join(rule_field, "action"), "is required (Allow or Deny)");
            }
        }
    }
    if (const auto* rules = present(p, "rules")) {
        if (!rules->is_array()) {
            refuse(join(field, "rules"), "must be an array of rule objects");
        }
        for (std::size_t i = 0; i < rules->as_array().size(); ++i) {
            check_rule(rules->as_array()[i], indexed(field, "rules", i));
        }
    }
}

void check_lifecycle(const json::value& lifecycle, const std::string& field) {
    const auto& l = require_object(lifecycle, field.empty() ? std::string("$") : field);
    check_finite(lifecycle, field);
    for (const char* key : {"autoSuspendPolicy", "autoSuspend"}) {
        if (const auto* v = present(l, key)) {
            const auto policy_field = join(field, key);
            const auto& p = require_object(*v, policy_field);
            optional_bool(p, policy_field, "enabled");
            for (const char* seconds : {"interval", "idleTimeoutInSeconds", "idleTimeoutSeconds"}) {
                optional_seconds(p, policy_field, seconds);
            }
            optional_choice(p, policy_field, "mode",
                            std::array<std::string_view, 2>{"Memory", "Disk"});
        }
    }
    for (const char* key : {"autoDeletePolicy", "autoDelete"}) {
        if (const auto* v = present(l, key)) {
            const auto policy_field = join(field, key);
            const auto& p = require_object(*v, policy_field);
            optional_bool(p, policy_field, "enabled");
            for (const char* seconds : {"deleteIntervalInSeconds", "deleteIntervalSeconds"}) {
                optional_seconds(p, policy_field, seconds);
            }
            optional_string(p, policy_field, "trigger");
        }
    }
}

void check_create_body(const json::object& body) {
    for (const auto& [key, v] : body) {
        check_finite(v, std::string(key));
    }
    if (const auto* sources = present(body, "sourcesRef")) {
        const auto& s = require_object(*sources, "sourcesRef");
        if (const auto* disk = present(s, "diskImage")) {
            const auto& d = require_object(*disk, "sourcesRef.diskImage");
            optional_string(d, "sourcesRef.diskImage", "id");
            optional_string(d, "sourcesRef.diskImage", "name");
            optional_bool(d, "sourcesRef.diskImage", "isPublic");
        }
    }
    if (const auto* resources = present(body, "resources")) {
        const auto& r = require_object(*resources, "resources");
        for (const auto& [key, v] : r) {
            if (!v.is_string() && !v.is_number() && !v.is_null()) {
                refuse(join("resources", key), "must be a quantity string such as \"1000m\"");
            }
        }
    }
    if (const auto* environment = present(body, "environment")) {
        const auto& e = require_object(*environment, "environment");
        for (const auto& [key, v] : e) {
            if (!v.is_string()) {
                refuse(join("environment", key), "must be a string");
            }
        }
    }
    if (const auto* policy = present(body, "egressPolicy")) {
        check_egress_policy(*policy, "egressPolicy");
    }
    if (const auto* lifecycle = present(body, "lifecycle")) {
        check_lifecycle(*lifecycle, "lifecycle");
    }
    for (const char* key : {"name", "presetSandboxType"}) {
        optional_string(body, "", key);
    }
}

}  // namespace maf_sandbox::emulator
