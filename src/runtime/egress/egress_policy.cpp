// The allowlist rules an `egress_allow` list compiles to, the policy a sandbox holds, and the
// operator switches for the egress proxy.
#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <cstdlib>
#include <limits>

#include "egress_host_names.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"

namespace maf_sandbox::runtime {
namespace {

constexpr std::uint16_t kHttpPort = 80;
constexpr std::uint16_t kHttpsPort = 443;
constexpr std::string_view kWildcardPrefix = "*.";

[[noreturn]] void refuse_entry(std::string_view entry, std::string_view why) {
    throw InvalidArgument(fmt::format(
        "egress_allow entry '{}' is not a host rule: {}; write a host name (example.com), a "
        "wildcard (*.example.com) or a host with a port (example.com:8443)",
        entry, why));
}

EgressRule compile_rule(const std::string& entry) {
    if (is_method_scoped_egress_rule(entry)) {
        refuse_entry(entry,
                     "method-scoped rules are not enforced by the local egress proxy (it "
                     "does not declare egress_methods)");
    }
    std::string_view text = entry;
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string_view::npos) {
        refuse_entry(entry, "it is empty");
    }
    text = text.substr(first, text.find_last_not_of(" \t") - first + 1);
    if (text.find("://") != std::string_view::npos) {
        refuse_entry(entry, "it has a scheme");
    }
    if (text.find_first_of("/?#@") != std::string_view::npos) {
        refuse_entry(entry, "it has a path, query or user part");
    }
    if (text.front() == '[' || std::count(text.begin(), text.end(), ':') > 1) {
        refuse_entry(entry, "IP literals are not allowed, rules name hosts");
    }
    EgressRule rule;
    if (const auto colon = text.find(':'); colon != std::string_view::npos) {
        const auto port = parse_port(text.substr(colon + 1));
        if (!port) {
            refuse_entry(entry, "its port is not a number from 1 to 65535");
        }
        rule.ports = {*port};
        text = text.substr(0, colon);
    } else {
        rule.ports = {kHttpPort, kHttpsPort};
    }
    if (text.starts_with(kWildcardPrefix)) {
        rule.wildcard = true;
        text.remove_prefix(kWildcardPrefix.size());
    }
    if (text.find('*') != std::string_view::npos) {
        refuse_entry(entry, "a wildcard may only be the whole first label (*.example.com)");
    }
    if (is_ip_literal(text)) {
        refuse_entry(entry, "IP literals are not allowed, rules name hosts");
    }
    auto host = normalize_host_name(text);
    if (!host) {
        refuse_entry(entry, "it is not a valid host name");
    }
    rule.host = std::move(*host);
    return rule;
}

}  // namespace

bool EgressRule::matches(std::string_view candidate, std::uint16_t port) const {
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) {
        return false;
    }
    const auto name = normalize_host_name(candidate);
    if (!name) {
        return false;
    }
    if (!wildcard) {
        return *name == host;
    }
    return name->size() > host.size() + 1 && name->ends_with(host) &&
           (*name)[name->size() - host.size() - 1] == '.';
}

std::vector<EgressRule> compile_allowlist(const std::vector<std::string>& egress_allow) {
    std::vector<EgressRule> rules;
    rules.reserve(egress_allow.size());
    for (const auto& entry : egress_allow) {
        rules.push_back(compile_rule(entry));
    }
    return rules;
}

EgressPolicy EgressPolicy::make(Egress mode, const std::vector<std::string>& egress_allow) {
    EgressPolicy policy;
    policy.mode = mode;
    policy.allow.reserve(egress_allow.size());
    for (const auto& entry : egress_allow) {
        policy.allow.push_back(ascii_lower(entry));
    }
    std::sort(policy.allow.begin(), policy.allow.end());
    policy.allow.erase(std::unique(policy.allow.begin(), policy.allow.end()), policy.allow.end());
    return policy;
}

boost::json::value EgressPolicy::to_json() const {
    boost::json::array hosts;
    for (const auto& entry : allow) {
        hosts.emplace_back(entry);
    }
    return boost::json::object{{"mode", to_string(mode)}, {"allow", std::move(hosts)}};
}

EgressPolicy EgressPolicy::from_json(const boost::json::value& json) {
    const auto* object = json.if_object();
    const auto* mode = object ? object->if_contains("mode") : nullptr;
    const auto* allow = object ? object->if_contains("allow") : nullptr;
    if (!mode || !mode->is_string() || (allow && !allow->is_array())) {
        throw InvalidArgument(
            "an egress policy record is not {\"mode\": string, \"allow\": [string]}; the sandbox "
            "record is damaged, dispose of the sandbox");
    }
    std::vector<std::string> entries;
    if (allow) {
        for (const auto& entry : allow->get_array()) {
            if (!entry.is_string()) {
                throw InvalidArgument(
                    "an egress policy's allow list holds a non-string; the sandbox record is "
                    "damaged, dispose of the sandbox");
            }
            entries.emplace_back(entry.get_string());
        }
    }
    return make(parse_egress(mode->get_string()), entries);
}

namespace {

// A positive whole number from the environment, or `fallback` when the variable is unset.
std::uint64_t positive_from_environment(const char* variable, std::uint64_t fallback,
                                        std::uint64_t most) {
    const char* text = std::getenv(variable);
    if (text == nullptr || *text == '\0') {
        return fallback;
    }
    std::uint64_t value = 0;
    const std::string_view view(text);
    const auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
    if (error != std::errc() || end != view.data() + view.size() || value == 0 || value > most) {
        throw InvalidArgument(fmt::format(
            "{}={} is not a whole number from 1 to {}; fix or unset it", variable, view, most));
    }
    return value;
}

}  // namespace

boost::json::value EgressLogLimits::to_json() const {
    return boost::json::object{{"max_bytes", max_bytes},
                               {"records_per_second", records_per_second}};
}

EgressLogLimits EgressLogLimits::from_json(const boost::json::value& json) {
    const auto* object = json.if_object();
    const auto* bytes = object ? object->if_contains("max_bytes") : nullptr;
    const auto* rate = object ? object->if_contains("records_per_second") : nullptr;
    const auto positive = [](const boost::json::value* value) {
        return value && (value->is_uint64() || (value->is_int64() && value->get_int64() > 0));
    };
    if (!positive(bytes) || !positive(rate) ||
        boost::json::value_to<std::uint64_t>(*rate) > std::numeric_limits<std::uint32_t>::max()) {
        throw InvalidArgument(
            "egress log limits are not {\"max_bytes\": positive, \"records_per_second\": "
            "positive}; pass them as EgressLogLimits::to_json writes them");
    }
    EgressLogLimits limits;
    limits.max_bytes = boost::json::value_to<std::uint64_t>(*bytes);
    limits.records_per_second =
        static_cast<std::uint32_t>(boost::json::value_to<std::uint64_t>(*rate));
    return limits;
}

std::uint64_t egress_log_budget(std::uint64_t limit, std::uint64_t disk_bytes) {
    constexpr std::uint64_t kFloor = 64 << 10;
    return std::max(kFloor, std::min(limit, disk_bytes / kEgressLogDiskShare));
}

EgressOperatorOptions EgressOperatorOptions::from_environment() {
    EgressOperatorOptions options;
    options.decision_log.max_bytes = positive_from_environment(
        "MAF_SANDBOX_EGRESS_LOG_BYTES", options.decision_log.max_bytes, 1ull << 40);
    options.decision_log.records_per_second = static_cast<std::uint32_t>(positive_from_environment(
        "MAF_SANDBOX_EGRESS_LOG_RATE", options.decision_log.records_per_second, 1000000));
    if (const char* hosts = std::getenv("MAF_SANDBOX_EGRESS_HOSTS_FILE"); hosts && *hosts) {
        options.hosts_file = hosts;
    }
    if (const char* allow = std::getenv("MAF_SANDBOX_EGRESS_ALLOW_PRIVATE")) {
        options.allow_private = std::string_view(allow) == "1";
    }
    return options;
}

boost::json::value EgressOperatorOptions::to_json() const {
    boost::json::object object;
    if (hosts_file) {
        object["hosts_file"] = hosts_file->string();
    } else {
        object["hosts_file"] = nullptr;
    }
    object["allow_private"] = allow_private;
    object["decision_log"] = decision_log.to_json();
    return object;
}

EgressOperatorOptions EgressOperatorOptions::from_json(const boost::json::value& json) {
    const auto* object = json.if_object();
    const auto* hosts = object ? object->if_contains("hosts_file") : nullptr;
    const auto* allow = object ? object->if_contains("allow_private") : nullptr;
    if (!object || (hosts && !hosts->is_string() && !hosts->is_null()) ||
        (allow && !allow->is_bool())) {
        throw InvalidArgument(
            "egress operator options are not {\"hosts_file\": string|null, \"allow_private\": "
            "bool}; pass them as EgressOperatorOptions::to_json writes them");
    }
    EgressOperatorOptions options;
    if (hosts && hosts->is_string()) {
        options.hosts_file = std::string(hosts->get_string());
    }
    options.allow_private = allow && allow->get_bool();
    // Absent in records written before the log had limits: the defaults.
    if (const auto* limits = object->if_contains("decision_log")) {
        options.decision_log = EgressLogLimits::from_json(*limits);
    }
    return options;
}

}  // namespace maf_sandbox::runtime
