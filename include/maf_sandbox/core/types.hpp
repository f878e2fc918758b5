// The protocol's data types: what a workload asks for (SandboxSpec), who asks (SandboxKey), what a
// backend promises (BackendDeclarations) and what comes back (ExecResult, SandboxEntry, disposal
// results). Field names follow docs/protocol.md sections 2.5 and 8.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "maf_sandbox/core/vocabulary.hpp"

namespace maf_sandbox {

using Seconds = std::chrono::duration<double>;

inline constexpr std::uint64_t kMiB = 1024 * 1024;

// --- Transfer limits ----------------------------------------------------------------------------

struct TransferLimits {
    std::uint64_t max_bytes_per_file = 0;
    std::uint64_t max_total_bytes = 0;
    std::uint64_t max_files = 0;

    // True when every field is at most the ceiling's.
    bool within(const TransferLimits& ceiling) const;
    bool operator==(const TransferLimits&) const = default;
};

// One constant for both sides: a spec's default equals a silent backend's default, so a default
// spec always fits a default backend.
inline constexpr TransferLimits kDefaultTransferLimits{8 * kMiB, 32 * kMiB, 64};

struct SandboxLimits {
    TransferLimits files_in = kDefaultTransferLimits;
    TransferLimits files_out = kDefaultTransferLimits;
    bool operator==(const SandboxLimits&) const = default;
};

inline constexpr SandboxLimits kDefaultSandboxLimits{};

// --- Identity of a sandbox ----------------------------------------------------------------------

// Scope and thread come from the host's request context, never from model input. call_id names one
// tool call at isolation scope `call` (empty otherwise). The spec's kind completes the identity.
struct SandboxKey {
    std::string scope;
    std::string thread_id;
    std::string agent_dir;
    std::string call_id;
    auto operator<=>(const SandboxKey&) const = default;
};

// --- Outputs ------------------------------------------------------------------------------------

struct DeclaredOutput {
    std::string path;  // literal, relative to the work dir; never a glob
    OutputDisposition disposition = OutputDisposition::land;
    std::optional<std::string> media_type;  // declared, never sniffed
    bool required = true;
    std::optional<std::string> name;  // landing name; defaults to path
    bool operator==(const DeclaredOutput&) const = default;
};

// --- Host tools ---------------------------------------------------------------------------------

// What a host-tool registry declares about the tools a run may call (docs/protocol.md 5.6 and 8.7).
struct HostToolAggregate {
    std::optional<SourceIntegrity> result_integrity;
    std::set<std::string> outbound_caps;
    std::set<Identity> identities;
    bool requires_approval = false;
    bool has_undeclared = false;
    TransferLimits response_limits = kDefaultTransferLimits;
    std::uint64_t max_host_tool_calls_per_run = 16;
    bool operator==(const HostToolAggregate&) const = default;
};

// --- The spec -----------------------------------------------------------------------------------

inline const std::set<Capability> kDefaultCapabilities{Capability::exec, Capability::files_in};

// The guest base a backend allocates when a spec leaves work_dir unset.
inline constexpr const char* kDefaultWorkDir = "/maf-sandbox/work";

// The plain fields of a spec, with the protocol's defaults. Build one, then construct a
// SandboxSpec from it: construction is where the spec's invariants are enforced.
struct SandboxSpecFields {
    std::string kind;
    std::optional<std::string> image;
    std::optional<std::string> image_id;
    std::vector<std::string> egress_allow;
    std::optional<std::string> work_dir;  // unset: the backend allocates its base
    std::map<std::string, std::string> labels;
    std::set<Capability> requires_capabilities = kDefaultCapabilities;
    std::optional<Isolation> min_isolation;  // may raise the host floor, never lower it
    std::vector<DeclaredOutput> declared_outputs;
    TransferLimits files_in = kDefaultTransferLimits;
    TransferLimits files_out = kDefaultTransferLimits;
    bool outputs_named_at_call_time = false;
    std::optional<HostToolAggregate> host_tools;
    Egress egress = Egress::closed;
    std::optional<OsFamily> requires_os_family;
    IsolationScope isolation_scope = IsolationScope::conversation;
    bool operator==(const SandboxSpecFields&) const = default;
};

// An immutable, validated spec. Read fields with `spec->egress`.
class SandboxSpec {
  public:
    // Throws InvalidArgument when kind is empty, or when egress_allow is non-empty and egress is
    // not allowlist (naming the hosts).
    explicit SandboxSpec(SandboxSpecFields fields);

    const SandboxSpecFields* operator->() const noexcept { return &fields_; }
    const SandboxSpecFields& fields() const noexcept { return fields_; }

    // Identities the run may act as, derived from the host-tool aggregate.
    std::set<Identity> identities() const;
    // The work dir the spec asked for, or the default base when unset.
    std::string work_dir_or_default() const;
    // A copy whose isolation scope is the stronger of its own and `scope`: raise-only.
    SandboxSpec with_isolation_scope_at_least(IsolationScope scope) const;

    bool operator==(const SandboxSpec&) const = default;

  private:
    SandboxSpecFields fields_;
};

// --- What a backend declares --------------------------------------------------------------------

// Silence rules: capabilities default to {exec, files_in} (charitable), limits to the default
// transfer limits (conservative), egress_modes to none (enforces nothing, every spec refused),
// os_families to none (refuses only specs that ask), isolation_scopes to none (read as
// {conversation}).
struct BackendDeclarations {
    std::set<Capability> capabilities = kDefaultCapabilities;
    SandboxLimits limits = kDefaultSandboxLimits;
    std::set<Egress> egress_modes;
    std::set<OsFamily> os_families;
    std::set<IsolationScope> isolation_scopes;

    std::set<IsolationScope> effective_isolation_scopes() const;
    bool declares(Capability capability) const { return capabilities.count(capability) > 0; }
};

// --- Exec ---------------------------------------------------------------------------------------

using Argv = std::vector<std::string>;
// An argv sequence is quoted by the backend before any shell; a string is a shell command line.
using Command = std::variant<Argv, std::string>;

struct ExecRequest {
    Command command;
    // Relative paths resolve beneath the sandbox's base; empty means the base itself.
    std::string working_directory;
    Seconds timeout{60.0};
    std::map<std::string, std::string> environment;
    std::string stdin_bytes;
    // Per-stream cap; nullopt lets the backend apply its own bound.
    std::optional<std::uint64_t> max_output_bytes;
};

struct ExecResult {
    ExecResult() = default;
    ExecResult(std::string out, std::string err, int code,
               std::optional<std::uint64_t> oom = std::nullopt)
        : stdout_bytes(std::move(out)),
          stderr_bytes(std::move(err)),
          exit_code(code),
          oom_kills(oom) {}

    std::string stdout_bytes;
    std::string stderr_bytes;
    int exit_code = 0;
    // The OOM killer's kills in the sandbox while the exec ran; nullopt where the backend cannot
    // tell.
    std::optional<std::uint64_t> oom_kills;

    // UTF-8 views: invalid sequences become U+FFFD, the bytes above are untouched.
    std::string stdout_text() const;
    std::string stderr_text() const;
};

// One piece of a streamed exec's output, as the program wrote it (a chunk is no line: it may end
// mid-line or mid-character).
enum class ExecStreamName { stdout_stream, stderr_stream };
struct ExecChunk {
    ExecStreamName stream = ExecStreamName::stdout_stream;
    std::string bytes;
};

// --- Files --------------------------------------------------------------------------------------

struct SandboxEntry {
    std::string path;  // relative to the call's working directory
    EntryKind kind = EntryKind::other;
    std::optional<std::uint64_t> size_bytes;  // unknown fails closed; a link's size is unknown
    bool operator==(const SandboxEntry&) const = default;
};

// --- Disposal -----------------------------------------------------------------------------------

struct DisposalFailure {
    DisposalCode code = DisposalCode::unknown;
    std::string detail;  // for logs; never shown to a model
    bool operator==(const DisposalFailure&) const = default;
};

// The failure with the highest precedence (unreachable > timeout > refused > unlisted > unknown),
// or nullopt when there is none. Details of the same code are joined.
std::optional<DisposalFailure> fold_disposal_failures(
    const std::vector<std::optional<DisposalFailure>>& failures);

struct ScopePurge {
    int disposed = 0;
    std::optional<DisposalFailure> undisposed;
};

}  // namespace maf_sandbox
