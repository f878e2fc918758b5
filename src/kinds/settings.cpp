#include "maf_sandbox/kinds/settings.hpp"

#include <cmath>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::kinds {
namespace {

bool positive_finite(Seconds value) {
    return std::isfinite(value.count()) && value.count() > 0.0;
}

}  // namespace

Egress kind_egress(const SandboxSettings& settings) {
    return settings.egress_allow.empty() ? Egress::closed : Egress::allowlist;
}

SandboxSpecFields kind_spec_fields(std::string kind, const SandboxSettings& settings,
                                   std::set<Capability> requires_capabilities) {
    if (!positive_finite(settings.timeout)) {
        throw InvalidArgument("the program timeout must be a positive number of seconds");
    }
    if (!positive_finite(settings.cleanup_timeout)) {
        throw InvalidArgument("the cleanup timeout must be a positive number of seconds");
    }
    if (settings.max_output_bytes == 0) {
        throw InvalidArgument("the output cap must be at least one byte");
    }
    SandboxSpecFields fields;
    fields.kind = std::move(kind);
    fields.image = settings.image;
    fields.egress_allow = settings.egress_allow;
    fields.egress = kind_egress(settings);
    fields.work_dir = settings.work_dir;
    fields.isolation_scope = settings.isolation_scope;
    fields.min_isolation = settings.min_isolation;
    fields.files_in = settings.files_in;
    fields.files_out = settings.files_out;
    fields.requires_capabilities = std::move(requires_capabilities);
    return fields;
}

}  // namespace maf_sandbox::kinds
