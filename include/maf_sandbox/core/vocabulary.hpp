// The protocol's enumerations. Every enum's strings (and rank, where it has one) live in exactly
// one table in vocabulary.cpp; to_string and the parse_* functions read that table, so an unknown
// string is always refused and no logic compares bare strings.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace maf_sandbox {

// The isolation ladder, weakest first. `os_process` is the third rung; the old name "process" is
// not a value and is refused by parse_isolation forever.
enum class Isolation { none, runtime, os_process, container, hardened_container, microvm, vm };

enum class Capability {
    exec,
    run_code,
    host_tools,
    files_in,
    files_out,
    files_list,
    files_delete,
    snapshot,
    reclaim,
    attached_identity,
    egress_methods,
    // exec_stream delivers output while the program runs (not all at its end).
    streaming_exec,
    // An exec can run on a terminal in the guest (a pseudo-terminal as its controlling terminal,
    // sized and resized by the caller) with its stdin forwarded as it is typed: `run -t`/`-i`.
    terminal,
};

// One axis, least to most isolated. A spec runs in exactly one mode; a backend declares the set it
// enforces. Resolution is membership only, never substitution.
enum class Egress { unrestricted, allowlist, closed };

enum class OsFamily { posix, windows };

// What a guest path is. Only `file` is ever read.
enum class EntryKind { file, directory, symlink, other };

// How long a sandbox lives relative to the host's calls, ranked: a spec may only raise it.
enum class IsolationScope { conversation, call };

enum class OutputDisposition { land, consume };

enum class Identity { app, user };

enum class SourceIntegrity { untrusted, trusted };

// Why a disposal did not complete, in order of precedence when several are folded into one.
enum class DisposalCode { unreachable, timeout, refused, unlisted, unknown };

// Why the shell file transfer refused a path (guest-side refusals, not transport failures).
enum class FileRefusal { not_found, is_directory, permission_denied, invalid_path };

std::string_view to_string(Isolation value);
std::string_view to_string(Capability value);
std::string_view to_string(Egress value);
std::string_view to_string(OsFamily value);
std::string_view to_string(EntryKind value);
std::string_view to_string(IsolationScope value);
std::string_view to_string(OutputDisposition value);
std::string_view to_string(Identity value);
std::string_view to_string(SourceIntegrity value);
std::string_view to_string(DisposalCode value);
std::string_view to_string(FileRefusal value);

// Each parse accepts exactly the strings of its table and throws InvalidArgument naming the
// accepted values otherwise.
Isolation parse_isolation(std::string_view text);
Capability parse_capability(std::string_view text);
Egress parse_egress(std::string_view text);
OsFamily parse_os_family(std::string_view text);
EntryKind parse_entry_kind(std::string_view text);
IsolationScope parse_isolation_scope(std::string_view text);
OutputDisposition parse_output_disposition(std::string_view text);
Identity parse_identity(std::string_view text);
SourceIntegrity parse_source_integrity(std::string_view text);
DisposalCode parse_disposal_code(std::string_view text);
FileRefusal parse_file_refusal(std::string_view text);

// Ranks come from the same tables; nullopt only for a value outside the enum (a cast gone wrong),
// which callers treat as "refuse".
std::optional<int> rank_of(Isolation value);
std::optional<int> rank_of(IsolationScope value);
std::optional<int> rank_of(SourceIntegrity value);
std::optional<int> rank_of(DisposalCode value);  // lower rank = higher precedence

// Every member of each ranked enum, in table order (used by tests that prove every member is
// ranked).
std::span<const Isolation> all_isolations();
std::span<const IsolationScope> all_isolation_scopes();
std::span<const Capability> all_capabilities();
std::span<const DisposalCode> all_disposal_codes();

// True when `declared` is at least as strong as `floor`. An unranked value never meets a floor.
bool meets_floor(Isolation declared, Isolation floor);

// The stronger of two rungs / scopes (raise-only combination).
Isolation stronger(Isolation a, Isolation b);
IsolationScope stronger(IsolationScope a, IsolationScope b);

}  // namespace maf_sandbox
