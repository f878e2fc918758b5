// The router: the one place where the host's security policy meets a backend's declarations.
// It selects one backend at construction (docs/protocol.md 4.1) and refuses, per spec, anything
// that backend cannot honour (4.2). It never substitutes another backend and never degrades a spec.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox {

struct SandboxRouterOptions {
    // The host's isolation floor. A spec's min_isolation may raise it, never lower it.
    Isolation min_isolation = Isolation::microvm;
    // The registered name of the backend to use; unset selects the first registered backend.
    std::optional<std::string> selected;
    // Capabilities and identities the host refuses to let any spec require.
    std::set<Capability> denied_capabilities;
    std::set<Identity> denied_identities;
    // The host's isolation-scope floor (raise-only, like min_isolation): every spec runs at the
    // stronger of this and its own isolation_scope.
    IsolationScope min_isolation_scope = IsolationScope::conversation;
    // Where disposal failures are logged; unset logs nowhere.
    std::shared_ptr<spdlog::logger> log;
};

// True when an egress_allow entry is a method-scoped rule. A spec expresses one as an HTTP method
// and a host separated by whitespace ("GET example.com", "POST api.example.com"); a plain host
// ("example.com") allows every method. Hosts never contain whitespace, so any entry that does is
// method-scoped.
bool is_method_scoped_egress_rule(std::string_view rule);

class SandboxRouter {
  public:
    // Selects the backend named `options.selected` (or the first one) and checks its rung against
    // the floor. Unselected backends are never checked, and there is no fallback.
    // Throws NoSandboxBackend when `selected` names no registered backend (listing the registered
    // names, sorted), SandboxBackendNotPermitted when the selected backend's rung is below the
    // floor or unranked, and InvalidArgument for a null backend. No backends at all is allowed:
    // the router is then disabled (enabled() is false) and acquire refuses.
    explicit SandboxRouter(std::vector<std::shared_ptr<SandboxBackend>> backends,
                           SandboxRouterOptions options = {});

    // The selected backend, or null when none is registered.
    const std::shared_ptr<SandboxBackend>& backend() const noexcept { return backend_; }
    bool enabled() const noexcept { return backend_ != nullptr; }
    Isolation min_isolation() const noexcept { return options_.min_isolation; }
    IsolationScope min_isolation_scope() const noexcept { return options_.min_isolation_scope; }

    // The per-spec checks, in this order (the first failing one is thrown; no logging, so this is
    // safe to call on every attach):
    //   1. a required capability the host denies -> SandboxCapabilityDenied (a method-scoped
    //      egress rule counts as requiring egress_methods here);
    //   2. an identity the host denies -> SandboxIdentityDenied;
    //   3. the backend's rung below stronger(host floor, spec.min_isolation)
    //      -> SandboxBackendNotPermitted;
    //   4. a required capability the backend does not declare -> SandboxCapabilityNotSupported;
    //   5. a method-scoped egress rule while the backend does not declare egress_methods
    //      -> SandboxCapabilityNotSupported;
    //   6. the effective isolation scope (stronger(host scope, spec scope)) outside the backend's
    //      effective_isolation_scopes() -> SandboxIsolationScopeNotSupported;
    //   7. a required OS family the backend does not declare -> SandboxOsFamilyNotSupported;
    //   8. files_in, then files_out, above the backend's ceiling
    //      -> SandboxTransferLimitsNotPermitted (refused, never clamped);
    //   9. the spec's egress mode not among the backend's egress_modes
    //      -> SandboxEgressNotEnforced.
    // Steps 1-3, 4, 7, 8 and 9 are docs/protocol.md 4.2 in its order; 5 and 6 follow the capability
    // check because both are "the backend cannot do this" refusals of the same family. Steps 4-9
    // are ensure_declared (declarations_check.hpp), which backends run for direct callers too.
    // With no backend registered it returns silently: nothing can run anyway.
    void ensure_can_serve(const SandboxSpec& spec) const;

    // Throws NoSandboxBackend when disabled; runs ensure_can_serve; refuses (InvalidArgument) a
    // key with an empty thread_id (a call with no bound conversation) and, at isolation scope
    // `call`, a key with an empty call_id. The backend receives the spec with its isolation scope
    // raised to the host's.
    Task<std::shared_ptr<Sandbox>> acquire(SandboxKey key, SandboxSpec spec);

    // Fans out to every registered backend, selected or not. Never throws (except cancellation):
    // a backend's exception or returned failure is logged and folded into the result.
    Task<std::optional<DisposalFailure>> dispose(SandboxKey key,
                                                 std::optional<std::string> kind = std::nullopt);

    // Fans out to every registered backend; sums what was disposed and folds what was not. Never
    // throws (except cancellation).
    Task<ScopePurge> dispose_scope(std::string scope, std::string thread_id);

    // Disposes the key's sandbox of `kind` on every backend and reports whether that completed
    // within `timeout` with no failure. Callers require true before re-acquiring the key with a
    // changed policy. A backend whose dispose ignores cancellation delays the answer until it
    // returns (the answer is still false).
    Task<bool> dispose_kind(SandboxKey key, std::string kind, Seconds timeout);

    // Per-call cleanup of the guest directory `call_path`, run in a finally. When the selected
    // backend declares reclaim: sandbox->reclaim(call_path, work dir, timeout), where the work dir
    // is spec.work_dir or, when unset, the sandbox's base. When it withholds reclaim (as ACAS
    // does): the key's sandbox of spec.kind is disposed instead (through dispose(), so on every
    // registered backend), within `timeout`. Returns nullopt on success, otherwise a reason fit
    // for a log line and a ReclaimFailure. Never throws except cancellation.
    Task<std::optional<std::string>> cleanup_call(std::shared_ptr<Sandbox> sandbox, SandboxKey key,
                                                  SandboxSpec spec, std::string call_path,
                                                  Seconds timeout);

  private:
    // dispose(key, kind) bounded by `timeout`; nullopt when it completed with no failure.
    Task<std::optional<std::string>> dispose_within(SandboxKey key, std::string kind,
                                                    Seconds timeout);

    std::vector<std::shared_ptr<SandboxBackend>> backends_;
    SandboxRouterOptions options_;
    std::shared_ptr<SandboxBackend> backend_;
};

}  // namespace maf_sandbox
