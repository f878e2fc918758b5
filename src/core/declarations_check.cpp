#include "maf_sandbox/core/declarations_check.hpp"

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/router.hpp"  // is_method_scoped_egress_rule
#include "name_lists.hpp"

namespace maf_sandbox {

using detail::describe_limits;
using detail::join;
using detail::sorted_names;

std::vector<std::string> method_scoped_rules(const SandboxSpec& spec) {
    std::vector<std::string> rules;
    for (const auto& rule : spec->egress_allow) {
        if (is_method_scoped_egress_rule(rule)) {
            rules.push_back(rule);
        }
    }
    return rules;
}

void ensure_declared(const SandboxSpec& spec, std::string_view backend_name,
                     const BackendDeclarations& declarations, IsolationScope host_scope) {
    const auto& kind = spec->kind;
    const auto method_rules = method_scoped_rules(spec);
    std::set<Capability> missing;
    for (auto capability : spec->requires_capabilities) {
        if (!declarations.declares(capability)) {
            missing.insert(capability);
        }
    }
    if (!missing.empty()) {
        throw SandboxCapabilityNotSupported(fmt::format(
            "kind '{}' requires capabilities backend '{}' does not declare: {} (it declares: "
            "{}); drop them from the spec's requires, or select a backend that declares them",
            kind, backend_name, sorted_names(missing), sorted_names(declarations.capabilities)));
    }

    if (!method_rules.empty() && !declarations.declares(Capability::egress_methods)) {
        throw SandboxCapabilityNotSupported(fmt::format(
            "kind '{}' has method-scoped egress rules ({}) but backend '{}' does not declare "
            "egress_methods (it declares: {}); allow whole hosts instead, or select a backend "
            "that declares egress_methods",
            kind, join(method_rules), backend_name, sorted_names(declarations.capabilities)));
    }

    const auto scope = stronger(host_scope, spec->isolation_scope);
    const auto scopes = declarations.effective_isolation_scopes();
    if (!scopes.count(scope)) {
        throw SandboxIsolationScopeNotSupported(fmt::format(
            "kind '{}' runs at isolation scope '{}' (host scope '{}', spec scope '{}') but "
            "backend '{}' serves only: {}; lower the spec's isolation_scope if the host allows "
            "it, or select a backend that serves '{}'",
            kind, to_string(scope), to_string(host_scope), to_string(spec->isolation_scope),
            backend_name, sorted_names(scopes), to_string(scope)));
    }

    if (spec->requires_os_family && !declarations.os_families.count(*spec->requires_os_family)) {
        throw SandboxOsFamilyNotSupported(fmt::format(
            "kind '{}' requires OS family '{}' but backend '{}' declares: {}; select a backend "
            "that hands out '{}' guests",
            kind, to_string(*spec->requires_os_family), backend_name,
            sorted_names(declarations.os_families), to_string(*spec->requires_os_family)));
    }

    const struct {
        std::string_view direction;
        const TransferLimits& asked;
        const TransferLimits& ceiling;
    } directions[] = {
        {"files_in", spec->files_in, declarations.limits.files_in},
        {"files_out", spec->files_out, declarations.limits.files_out},
    };
    for (const auto& direction : directions) {
        if (!direction.asked.within(direction.ceiling)) {
            throw SandboxTransferLimitsNotPermitted(fmt::format(
                "kind '{}' asks {} limits of {} but backend '{}' allows at most {}; lower the "
                "spec's {} limits (they are refused, never clamped), or select a backend with "
                "larger ceilings",
                kind, direction.direction, describe_limits(direction.asked), backend_name,
                describe_limits(direction.ceiling), direction.direction));
        }
    }

    if (!declarations.egress_modes.count(spec->egress)) {
        throw SandboxEgressNotEnforced(fmt::format(
            "kind '{}' runs with egress '{}' but backend '{}' {}; choose an egress mode the "
            "backend enforces, or select a backend that enforces '{}'",
            kind, to_string(spec->egress), backend_name,
            declarations.egress_modes.empty()
                ? std::string("enforces nothing")
                : fmt::format("enforces only: {}", sorted_names(declarations.egress_modes)),
            to_string(spec->egress)));
    }
}

}  // namespace maf_sandbox
