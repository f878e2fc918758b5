#include "maf_sandbox/core/types.hpp"

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox {

bool TransferLimits::within(const TransferLimits& ceiling) const {
    return max_bytes_per_file <= ceiling.max_bytes_per_file &&
           max_total_bytes <= ceiling.max_total_bytes && max_files <= ceiling.max_files;
}

SandboxSpec::SandboxSpec(SandboxSpecFields fields) : fields_(std::move(fields)) {
    if (fields_.kind.empty()) {
        throw InvalidArgument(
            "a sandbox spec needs a kind (the workload's name, part of the sandbox's identity); "
            "set `kind`");
    }
    if (!fields_.egress_allow.empty() && fields_.egress != Egress::allowlist) {
        std::string hosts;
        for (const auto& host : fields_.egress_allow) {
            hosts += hosts.empty() ? "" : ", ";
            hosts += host;
        }
        throw InvalidArgument(fmt::format(
            "egress_allow names hosts ({}) but egress is '{}'; set egress to 'allowlist' to allow "
            "them, or drop egress_allow",
            hosts, to_string(fields_.egress)));
    }
}

std::set<Identity> SandboxSpec::identities() const {
    return fields_.host_tools ? fields_.host_tools->identities : std::set<Identity>{};
}

std::string SandboxSpec::work_dir_or_default() const {
    return fields_.work_dir.value_or(kDefaultWorkDir);
}

SandboxSpec SandboxSpec::with_isolation_scope_at_least(IsolationScope scope) const {
    auto copy = fields_;
    copy.isolation_scope = stronger(copy.isolation_scope, scope);
    return SandboxSpec(std::move(copy));
}

std::set<IsolationScope> BackendDeclarations::effective_isolation_scopes() const {
    return isolation_scopes.empty() ? std::set<IsolationScope>{IsolationScope::conversation}
                                    : isolation_scopes;
}

std::string ExecResult::stdout_text() const {
    return replace_invalid_utf8(stdout_bytes);
}
std::string ExecResult::stderr_text() const {
    return replace_invalid_utf8(stderr_bytes);
}

std::optional<DisposalFailure> fold_disposal_failures(
    const std::vector<std::optional<DisposalFailure>>& failures) {
    std::optional<DisposalFailure> folded;
    for (const auto& failure : failures) {
        if (!failure) {
            continue;
        }
        if (!folded || rank_of(failure->code) < rank_of(folded->code)) {
            folded = failure;
        } else if (failure->code == folded->code && !failure->detail.empty()) {
            folded->detail += folded->detail.empty() ? "" : "; ";
            folded->detail += failure->detail;
        }
    }
    return folded;
}

}  // namespace maf_sandbox
