#include "field_support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json/array.hpp>
#include <cctype>

#include "maf_sandbox/core/utf8.hpp"
#include "refusal.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
namespace {

constexpr const char* kEmulatorVmm = "maf-emulator";

std::string join(std::string_view field, std::string_view key) {
    return field.empty() ? std::string(key) : fmt::format("{}.{}", field, key);
}

// Keys come from the request: the detail stays short and valid UTF-8.
std::string shown(const std::string& field) {
    return replace_invalid_utf8(field.size() > 200 ? field.substr(0, 200) + "..." : field);
}

[[noreturn]] void refuse(const std::string& field, std::string_view why) {
    throw Refusal{400, kFieldNotSupported, fmt::format("'{}' {}", shown(field), why)};
}

[[noreturn]] void refuse_unknown(const std::string& field, std::string_view where) {
    refuse(field, fmt::format("is not a field of {} in the ACAS REST API as acas-emulator "
                              "serves it; remove it (nothing is accepted and ignored)",
                              where));
}

bool absent(const json::value* v) {
    return v == nullptr || v->is_null();
}

// Null, [] or {}: asks for nothing, so accepting it drops nothing.
bool asks_for_nothing(const json::value& v) {
    return v.is_null() || (v.is_array() && v.as_array().empty()) ||
           (v.is_object() && v.as_object().empty());
}

bool is_one_of(std::string_view key, std::initializer_list<std::string_view> known) {
    return std::find(known.begin(), known.end(), key) != known.end();
}

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

void only_keys(const json::value* v, const std::string& field,
               std::initializer_list<std::string_view> known, std::string_view where) {
    if (absent(v) || !v->is_object()) {
        return;  // absent, or a wrong type body_checks refuses with its own message
    }
    for (const auto& [key, value] : v->as_object()) {
        if (!is_one_of(key, known)) {
            refuse_unknown(join(field, key), where);
        }
        (void)value;
    }
}

// Field -> why the emulator does not implement it (for the create body).
struct Unimplemented {
    std::string_view key;
    std::string_view why;
};

constexpr Unimplemented kUnimplementedCreateFields[] = {
    {"ports",
     "is not implemented by acas-emulator (it serves no port routes and no proxy), so a "
     "sandbox could never be reached on it; create without ports"},
    {"volumes", "is not implemented by acas-emulator (it has no volumes); create without volumes"},
    {"connections",
     "is not implemented by acas-emulator (it has no connections); create without them"},
    {"entrypoint",
     "is not implemented by acas-emulator (a sandbox runs no entrypoint of its own); create "
     "without it and start long-running processes with executeShellCommand"},
    {"cmd",
     "is not implemented by acas-emulator (a sandbox runs no entrypoint of its own); create "
     "without it and start long-running processes with executeShellCommand"},
};

}  // namespace

void refuse_unknown_fields(const json::object& body, std::initializer_list<std::string_view> known,
                           std::string_view where) {
    for (const auto& [key, value] : body) {
        if (!is_one_of(key, known)) {
            refuse_unknown(std::string(key), where);
        }
        (void)value;
    }
}

void refuse_unsupported_create_fields(const json::object& body) {
    constexpr std::string_view where = "the sandbox create body";
    // The service's precedence, as a client recorded it: a body without a source is refused for
    // that before any field of it is looked at (a flat {disk, cpu, memory} body gets this).
    if (absent(body.if_contains("sourcesRef")) && absent(body.if_contains("presetSandboxType"))) {
        throw Refusal{400, kValidationFailed,
                      "'sourcesRef' is required when not using a preset sandbox type"};
    }
    for (const auto& [key, value] : body) {
        if (is_one_of(key, {"sourcesRef", "resources", "lifecycle", "labels", "environment",
                            "egressPolicy"})) {
            continue;
        }
        const auto unimplemented = std::find_if(
            std::begin(kUnimplementedCreateFields), std::end(kUnimplementedCreateFields),
            [&](const Unimplemented& u) { return u.key == std::string_view(key); });
        if (unimplemented != std::end(kUnimplementedCreateFields)) {
            if (!asks_for_nothing(value)) {
                refuse(std::string(key), unimplemented->why);
            }
            continue;
        }
        if (key == "vmmType") {
            // Every sandbox here is the runtime's container, and is answered as such.
            if (!value.is_null() &&
                !(value.is_string() && iequals(value.as_string(), kEmulatorVmm))) {
                refuse("vmmType", fmt::format("can only be '{}' on acas-emulator (every sandbox is "
                                              "a local container, isolation=container)",
                                              kEmulatorVmm));
            }
            continue;
        }
        if (key == "skipEgressProxy") {
            if (!value.is_null() && !(value.is_bool() && !value.as_bool())) {
                refuse("skipEgressProxy",
                       "is not implemented by acas-emulator (egress is always enforced as "
                       "egressPolicy says); only false is accepted");
            }
            continue;
        }
        if (key == "presetSandboxType") {
            refuse("presetSandboxType",
                   "is not implemented by acas-emulator (it has no preset sandbox types); pass "
                   "sourcesRef.diskImage");
        }
        if (key == "customerVnetConnectionName") {
            refuse("customerVnetConnectionName",
                   "is not implemented by acas-emulator (it has no virtual networks)");
        }
        refuse_unknown(std::string(key), where);
    }
    // Inside the implemented fields: only the keys the emulator acts on.
    if (const auto* sources = body.if_contains("sourcesRef");
        !absent(sources) && sources->is_object()) {
        only_keys(sources, "sourcesRef", {"diskImage", "snapshot"}, where);
        only_keys(sources->as_object().if_contains("diskImage"), "sourcesRef.diskImage",
                  {"id", "name", "isPublic"}, where);
    }
    if (const auto* resources = body.if_contains("resources");
        !absent(resources) && resources->is_object()) {
        for (const auto& [key, value] : resources->as_object()) {
            if (key == "disk") {
                if (!value.is_null()) {
                    refuse("resources.disk",
                           "is not implemented by acas-emulator (sandboxes share the host's disk; "
                           "no size is enforced); create without it");
                }
                continue;
            }
            if (!is_one_of(key, {"cpu", "memory"})) {
                refuse_unknown(join("resources", key), where);
            }
        }
    }
    if (const auto* policy = body.if_contains("egressPolicy");
        !absent(policy) && policy->is_object()) {
        refuse_unsupported_egress_fields(policy->as_object(), "egressPolicy");
    }
    if (const auto* lifecycle = body.if_contains("lifecycle");
        !absent(lifecycle) && lifecycle->is_object()) {
        refuse_unsupported_lifecycle_fields(lifecycle->as_object(), "lifecycle");
    }
}

void refuse_unsupported_lifecycle_fields(const json::object& lifecycle, const std::string& field) {
    constexpr std::string_view where = "a lifecycle policy";
    for (const auto& [key, value] : lifecycle) {
        if (key == "autoSuspend" || key == "autoDelete") {
            refuse(join(field, key),
                   fmt::format("is not the service's spelling; send '{}Policy' (only the SDK's "
                               "reader tolerates '{}')",
                               join(field, key), std::string(key)));
        }
        if (!is_one_of(key, {"autoSuspendPolicy", "autoDeletePolicy"})) {
            refuse_unknown(join(field, key), where);
        }
        (void)value;
    }
    if (const auto* suspend = lifecycle.if_contains("autoSuspendPolicy");
        !absent(suspend) && suspend->is_object()) {
        const auto policy = join(field, "autoSuspendPolicy");
        for (const auto& [key, value] : suspend->as_object()) {
            if (key == "idleTimeoutInSeconds" || key == "idleTimeoutSeconds") {
                refuse(join(policy, key),
                       fmt::format("is not the service's spelling; send '{}.interval' (only the "
                                   "SDK's reader tolerates '{}')",
                                   policy, std::string(key)));
            }
            if (!is_one_of(key, {"enabled", "interval", "mode"})) {
                refuse_unknown(join(policy, key), where);
            }
            (void)value;
        }
    }
    if (const auto* remove = lifecycle.if_contains("autoDeletePolicy");
        !absent(remove) && remove->is_object()) {
        const auto policy = join(field, "autoDeletePolicy");
        for (const auto& [key, value] : remove->as_object()) {
            if (key == "deleteIntervalSeconds") {
                // Reference 3.3: the SDK and three independent clients send
                // deleteIntervalInSeconds; this form is one unofficial port's slip, which the
                // service's model would not bind: honouring it would delete where the service
                // never would.
                refuse(join(policy, key), fmt::format("is not the service's spelling; send "
                                                      "'{}.deleteIntervalInSeconds'",
                                                      policy));
            }
            if (key == "trigger") {
                // The one trigger implemented: the interval counts from entering Stopped or
                // Suspended.
                if (!value.is_null() &&
                    !(value.is_string() && iequals(value.as_string(), "AfterSuspend"))) {
                    refuse(join(policy, key),
                           "can only be 'AfterSuspend' on acas-emulator (the delete interval "
                           "counts from the sandbox entering Stopped or Suspended)");
                }
                continue;
            }
            if (!is_one_of(key, {"enabled", "deleteIntervalInSeconds"})) {
                refuse_unknown(join(policy, key), where);
            }
        }
    }
}

void refuse_unsupported_egress_fields(const json::object& policy, const std::string& field) {
    constexpr std::string_view where = "an egress policy";
    for (const auto& [key, value] : policy) {
        if (!is_one_of(key, {"defaultAction", "trafficInspection", "hostRules", "rules"})) {
            refuse_unknown(join(field, key), where);
        }
        (void)value;
    }
    const auto* rules = policy.if_contains("hostRules");
    if (absent(rules) || !rules->is_array()) {
        return;
    }
    for (std::size_t i = 0; i < rules->as_array().size(); ++i) {
        only_keys(&rules->as_array()[i], fmt::format("{}[{}]", join(field, "hostRules"), i),
                  {"pattern", "action"}, where);
    }
}

void refuse_unsupported_disk_image_fields(const json::object& body) {
    constexpr std::string_view where = "the disk image create body";
    // managedIdentityResourceId and registryCredentials only authorise the pull (reference 4.6);
    // the local registry stand-in admits every pull, and the service never echoes them.
    refuse_unknown_fields(
        body, {"image", "labels", "name", "managedIdentityResourceId", "registryCredentials"},
        where);
    if (const auto* image = body.if_contains("image"); !absent(image) && image->is_object()) {
        for (const auto& [key, value] : image->as_object()) {
            if (key == "entrypoint" || key == "cmd") {
                if (!asks_for_nothing(value)) {
                    refuse(join("image", key),
                           "is not implemented by acas-emulator (a sandbox never runs its "
                           "image's entrypoint or command); import without it");
                }
                continue;
            }
            if (key != "base") {
                refuse_unknown(join("image", key), where);
            }
        }
    }
    only_keys(body.if_contains("registryCredentials"), "registryCredentials", {"username", "token"},
              where);
    // Never stored, so never echoed; still type-checked, as the service binds them.
    const auto must_be_string = [](const json::value* v, const std::string& field) {
        if (!absent(v) && !v->is_string()) {
            throw Refusal{400, kValidationFailed, fmt::format("'{}' must be a string.", field)};
        }
    };
    must_be_string(body.if_contains("managedIdentityResourceId"), "managedIdentityResourceId");
    if (const auto* credentials = body.if_contains("registryCredentials"); !absent(credentials)) {
        if (!credentials->is_object()) {
            throw Refusal{400, kValidationFailed,
                          "'registryCredentials' must be an object {username, token}."};
        }
        for (const char* key : {"username", "token"}) {
            must_be_string(credentials->as_object().if_contains(key),
                           join("registryCredentials", key));
        }
    }
}

}  // namespace maf_sandbox::emulator
