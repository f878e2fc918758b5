#include "maf_sandbox/core/vocabulary.hpp"

#include <fmt/format.h>
#include <array>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox {
namespace {

template <typename Enum>
struct Row {
    Enum value;
    std::string_view text;
    int rank;
};

// The one table per enum. Ranks are data: a new member without a row fails the rank tests.
constexpr std::array<Row<Isolation>, 7> kIsolation{{
    {Isolation::none, "none", 0},
    {Isolation::runtime, "runtime", 1},
    {Isolation::os_process, "os_process", 2},
    {Isolation::container, "container", 3},
    {Isolation::hardened_container, "hardened_container", 4},
    {Isolation::microvm, "microvm", 5},
    {Isolation::vm, "vm", 6},
}};

constexpr std::array<Row<Capability>, 13> kCapability{{
    {Capability::exec, "exec", 0},
    {Capability::run_code, "run_code", 0},
    {Capability::host_tools, "host_tools", 0},
    {Capability::files_in, "files_in", 0},
    {Capability::files_out, "files_out", 0},
    {Capability::files_list, "files_list", 0},
    {Capability::files_delete, "files_delete", 0},
    {Capability::snapshot, "snapshot", 0},
    {Capability::reclaim, "reclaim", 0},
    {Capability::attached_identity, "attached_identity", 0},
    {Capability::egress_methods, "egress_methods", 0},
    {Capability::streaming_exec, "streaming_exec", 0},
    {Capability::terminal, "terminal", 0},
}};

constexpr std::array<Row<Egress>, 3> kEgress{{
    {Egress::unrestricted, "unrestricted", 0},
    {Egress::allowlist, "allowlist", 1},
    {Egress::closed, "closed", 2},
}};

constexpr std::array<Row<OsFamily>, 2> kOsFamily{{
    {OsFamily::posix, "posix", 0},
    {OsFamily::windows, "windows", 0},
}};

constexpr std::array<Row<EntryKind>, 4> kEntryKind{{
    {EntryKind::file, "file", 0},
    {EntryKind::directory, "directory", 0},
    {EntryKind::symlink, "symlink", 0},
    {EntryKind::other, "other", 0},
}};

constexpr std::array<Row<IsolationScope>, 2> kIsolationScope{{
    {IsolationScope::conversation, "conversation", 0},
    {IsolationScope::call, "call", 1},
}};

constexpr std::array<Row<OutputDisposition>, 2> kOutputDisposition{{
    {OutputDisposition::land, "land", 0},
    {OutputDisposition::consume, "consume", 0},
}};

constexpr std::array<Row<Identity>, 2> kIdentity{{
    {Identity::app, "app", 0},
    {Identity::user, "user", 0},
}};

constexpr std::array<Row<SourceIntegrity>, 2> kSourceIntegrity{{
    {SourceIntegrity::untrusted, "untrusted", 0},
    {SourceIntegrity::trusted, "trusted", 1},
}};

constexpr std::array<Row<DisposalCode>, 5> kDisposalCode{{
    {DisposalCode::unreachable, "unreachable", 0},
    {DisposalCode::timeout, "timeout", 1},
    {DisposalCode::refused, "refused", 2},
    {DisposalCode::unlisted, "unlisted", 3},
    {DisposalCode::unknown, "unknown", 4},
}};

constexpr std::array<Row<FileRefusal>, 4> kFileRefusal{{
    {FileRefusal::not_found, "not_found", 0},
    {FileRefusal::is_directory, "is_directory", 0},
    {FileRefusal::permission_denied, "permission_denied", 0},
    {FileRefusal::invalid_path, "invalid_path", 0},
}};

template <typename Enum, std::size_t N>
const Row<Enum>* find(const std::array<Row<Enum>, N>& table, Enum value) {
    for (const auto& row : table) {
        if (row.value == value) {
            return &row;
        }
    }
    return nullptr;
}

template <typename Enum, std::size_t N>
std::string_view text_of(const std::array<Row<Enum>, N>& table, Enum value) {
    const auto* row = find(table, value);
    return row ? row->text : std::string_view{"<invalid>"};
}

template <typename Enum, std::size_t N>
Enum parse(const std::array<Row<Enum>, N>& table, std::string_view what, std::string_view text) {
    for (const auto& row : table) {
        if (row.text == text) {
            return row.value;
        }
    }
    std::string accepted;
    for (const auto& row : table) {
        accepted += accepted.empty() ? "" : ", ";
        accepted += row.text;
    }
    // The refused text is echoed only in part: it may be megabytes of untrusted input.
    constexpr std::size_t kEchoed = 64;
    const auto shown = bounded_utf8(text, kEchoed);
    throw InvalidArgument(fmt::format("unknown {} '{}'; use one of: {}", what, shown, accepted));
}

template <typename Enum, std::size_t N>
std::optional<int> rank_in(const std::array<Row<Enum>, N>& table, Enum value) {
    const auto* row = find(table, value);
    return row ? std::optional<int>{row->rank} : std::nullopt;
}

template <typename Enum, std::size_t N>
constexpr std::array<Enum, N> members(const std::array<Row<Enum>, N>& table) {
    std::array<Enum, N> out{};
    for (std::size_t i = 0; i < N; ++i) {
        out[i] = table[i].value;
    }
    return out;
}

constexpr auto kAllIsolations = members(kIsolation);
constexpr auto kAllIsolationScopes = members(kIsolationScope);
constexpr auto kAllCapabilities = members(kCapability);
constexpr auto kAllDisposalCodes = members(kDisposalCode);

}  // namespace

std::string_view to_string(Isolation v) {
    return text_of(kIsolation, v);
}
std::string_view to_string(Capability v) {
    return text_of(kCapability, v);
}
std::string_view to_string(Egress v) {
    return text_of(kEgress, v);
}
std::string_view to_string(OsFamily v) {
    return text_of(kOsFamily, v);
}
std::string_view to_string(EntryKind v) {
    return text_of(kEntryKind, v);
}
std::string_view to_string(IsolationScope v) {
    return text_of(kIsolationScope, v);
}
std::string_view to_string(OutputDisposition v) {
    return text_of(kOutputDisposition, v);
}
std::string_view to_string(Identity v) {
    return text_of(kIdentity, v);
}
std::string_view to_string(SourceIntegrity v) {
    return text_of(kSourceIntegrity, v);
}
std::string_view to_string(DisposalCode v) {
    return text_of(kDisposalCode, v);
}
std::string_view to_string(FileRefusal v) {
    return text_of(kFileRefusal, v);
}

Isolation parse_isolation(std::string_view t) {
    return parse(kIsolation, "isolation", t);
}
Capability parse_capability(std::string_view t) {
    return parse(kCapability, "capability", t);
}
Egress parse_egress(std::string_view t) {
    return parse(kEgress, "egress mode", t);
}
OsFamily parse_os_family(std::string_view t) {
    return parse(kOsFamily, "OS family", t);
}
EntryKind parse_entry_kind(std::string_view t) {
    return parse(kEntryKind, "entry kind", t);
}
IsolationScope parse_isolation_scope(std::string_view t) {
    return parse(kIsolationScope, "isolation scope", t);
}
OutputDisposition parse_output_disposition(std::string_view t) {
    return parse(kOutputDisposition, "output disposition", t);
}
Identity parse_identity(std::string_view t) {
    return parse(kIdentity, "identity", t);
}
SourceIntegrity parse_source_integrity(std::string_view t) {
    return parse(kSourceIntegrity, "source integrity", t);
}
DisposalCode parse_disposal_code(std::string_view t) {
    return parse(kDisposalCode, "disposal code", t);
}
FileRefusal parse_file_refusal(std::string_view t) {
    return parse(kFileRefusal, "file refusal", t);
}

std::optional<int> rank_of(Isolation v) {
    return rank_in(kIsolation, v);
}
std::optional<int> rank_of(IsolationScope v) {
    return rank_in(kIsolationScope, v);
}
std::optional<int> rank_of(SourceIntegrity v) {
    return rank_in(kSourceIntegrity, v);
}
std::optional<int> rank_of(DisposalCode v) {
    return rank_in(kDisposalCode, v);
}

std::span<const Isolation> all_isolations() {
    return kAllIsolations;
}
std::span<const IsolationScope> all_isolation_scopes() {
    return kAllIsolationScopes;
}
std::span<const Capability> all_capabilities() {
    return kAllCapabilities;
}
std::span<const DisposalCode> all_disposal_codes() {
    return kAllDisposalCodes;
}

bool meets_floor(Isolation declared, Isolation floor) {
    const auto d = rank_of(declared);
    const auto f = rank_of(floor);
    return d && f && *d >= *f;
}

Isolation stronger(Isolation a, Isolation b) {
    return rank_of(a).value_or(-1) >= rank_of(b).value_or(-1) ? a : b;
}

IsolationScope stronger(IsolationScope a, IsolationScope b) {
    return rank_of(a).value_or(-1) >= rank_of(b).value_or(-1) ? a : b;
}

}  // namespace maf_sandbox
