#include "egress_policy.hpp"

#include <fmt/format.h>

#include <vector>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
namespace {

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        const auto lower = [](char c) {
            return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
        };
        if (lower(a[i]) != lower(b[i])) {
            return false;
        }
    }
    return true;
}

std::string text_of(const json::object& o, const char* key) {
    const auto* v = o.if_contains(key);
    return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

}  // namespace

runtime::EgressPolicy egress_for(const json::object& policy) {
    std::string action = text_of(policy, "defaultAction");
    if (action.empty()) {
        action = "Allow";  // the service's default is open
    }
    std::vector<std::string> allow;
    std::vector<std::string> deny;
    if (const auto* rules = policy.if_contains("hostRules");
        rules != nullptr && !rules->is_null()) {
        if (!rules->is_array()) {
            throw UnsupportedEgressPolicy("'egressPolicy.hostRules' must be an array.");
        }
        for (const auto& rule : rules->as_array()) {
            if (!rule.is_object()) {
                throw UnsupportedEgressPolicy("each host rule must be an object.");
            }
            const auto pattern = text_of(rule.as_object(), "pattern");
            const auto rule_action = text_of(rule.as_object(), "action");
            if (pattern.empty()) {
                throw UnsupportedEgressPolicy("a host rule needs a 'pattern'.");
            }
            if (iequals(rule_action, "Allow")) {
                allow.push_back(pattern);
            } else if (iequals(rule_action, "Deny")) {
                deny.push_back(pattern);
            } else {
                throw UnsupportedEgressPolicy(
                    fmt::format("host rule action '{}' is not Allow or Deny.", rule_action));
            }
        }
    }
    if (iequals(action, "Allow")) {
        if (!deny.empty()) {
            throw UnsupportedEgressPolicy(fmt::format(
                "the emulator's runtime cannot deny single hosts ('{}') under defaultAction Allow; "
                "use defaultAction Deny with Allow rules",
                deny.front()));
        }
        return runtime::EgressPolicy::make(Egress::unrestricted, {});
    }
    if (!iequals(action, "Deny")) {
        throw UnsupportedEgressPolicy(
            fmt::format("defaultAction '{}' is not Allow or Deny.", action));
    }
    if (allow.empty()) {
        return runtime::EgressPolicy::make(Egress::closed, {});
    }
    try {
        runtime::compile_allowlist(allow);  // refuses what the proxy could not match
    } catch (const InvalidArgument& e) {
        throw UnsupportedEgressPolicy(e.what());
    }
    return runtime::EgressPolicy::make(Egress::allowlist, allow);
}

}  // namespace maf_sandbox::emulator
