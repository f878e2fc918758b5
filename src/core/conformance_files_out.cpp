// FILES_OUT suite (docs/protocol.md 6.2): reads and stats must name links, never follow them, and
// refuse any path whose ancestors include a link, from the filesystem root down.
#include <fmt/format.h>

#include "conformance_support.hpp"

namespace maf_sandbox {
namespace {

using conformance_detail::expect;
using conformance_detail::refused_with;

std::string describe(const std::optional<SandboxEntry>& entry) {
    if (!entry) {
        return "nothing";
    }
    return fmt::format("a {} of {} bytes", to_string(entry->kind),
                       entry->size_bytes ? std::to_string(*entry->size_bytes) : "unknown");
}

Task<void> legitimate_read(ProbeContext& context) {
    auto& sandbox = context.subject.sandbox();
    const auto& work = context.paths.work;
    const auto entry = co_await sandbox.stat_file("real/inside.txt", work);
    expect(entry && entry->kind == EntryKind::file && entry->size_bytes == kInsidePayload.size(),
           fmt::format("stat of real/inside.txt described {}, not a file of {} bytes",
                       describe(entry), kInsidePayload.size()));
    const auto bytes = co_await sandbox.read_file("real/inside.txt", work, kProbeReadCap);
    expect(bytes == kInsidePayload,
           fmt::format("read of real/inside.txt returned {} bytes that are not the planted ones",
                       bytes.size()));
}

Task<void> link_is_named(ProbeContext& context) {
    const auto entry =
        co_await context.subject.sandbox().stat_file("link-file", context.paths.work);
    expect(entry.has_value(), "stat of link-file returned nothing: the link was hidden");
    expect(entry->kind == EntryKind::symlink,
           fmt::format("stat of link-file said '{}', not 'symlink'", to_string(entry->kind)));
    expect(!entry->size_bytes.has_value(),
           fmt::format("stat of link-file gave a size ({} bytes): a link's size must be unknown",
                       entry->size_bytes.value_or(0)));
}

Task<void> link_is_never_read(ProbeContext& context) {
    co_await refused_with<FileError>(
        "OSError", "read of link-file",
        context.subject.sandbox().read_file("link-file", context.paths.work, kProbeReadCap));
}

Task<void> stat_through_linked_parent(ProbeContext& context) {
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "stat of link-dir/secret.txt",
        context.subject.sandbox().stat_file("link-dir/secret.txt", context.paths.work));
}

Task<void> read_through_linked_parent(ProbeContext& context) {
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "read of link-dir/secret.txt",
        context.subject.sandbox().read_file("link-dir/secret.txt", context.paths.work,
                                            kProbeReadCap));
}

Task<void> linked_working_directory(ProbeContext& context) {
    auto& sandbox = context.subject.sandbox();
    const auto& wd = context.paths.linked_directory;
    co_await refused_with<ConfinementEscape>("ConfinementEscape",
                                             "stat of secret.txt in a linked working directory",
                                             sandbox.stat_file("secret.txt", wd));
    co_await refused_with<ConfinementEscape>("ConfinementEscape",
                                             "read of secret.txt in a linked working directory",
                                             sandbox.read_file("secret.txt", wd, kProbeReadCap));
}

Task<void> linked_ancestor_of_working_directory(ProbeContext& context) {
    auto& sandbox = context.subject.sandbox();
    const auto& wd = context.paths.under_linked_directory;
    co_await refused_with<ConfinementEscape>("ConfinementEscape",
                                             "stat of leaf.txt below a linked ancestor",
                                             sandbox.stat_file("leaf.txt", wd));
    co_await refused_with<ConfinementEscape>("ConfinementEscape",
                                             "read of leaf.txt below a linked ancestor",
                                             sandbox.read_file("leaf.txt", wd, kProbeReadCap));
}

Task<void> plain_parent_is_not_an_escape(ProbeContext& context) {
    co_await refused_with<NotADirectory>(
        "NotADirectory", "stat of plain.txt/deeper.txt",
        context.subject.sandbox().stat_file("plain.txt/deeper.txt", context.paths.work));
}

Task<void> listing_linked_directory(ProbeContext& context) {
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "listing of link-dir",
        context.subject.sandbox().list_dir("link-dir", context.paths.work));
}

Task<void> listing_through_linked_parent(ProbeContext& context) {
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "listing of link-dir/sub",
        context.subject.sandbox().list_dir("link-dir/sub", context.paths.work));
}

Task<void> listing_under_linked_ancestor(ProbeContext& context) {
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "listing of . below a linked ancestor",
        context.subject.sandbox().list_dir(".", context.paths.under_linked_directory));
}

Task<void> listing_names_its_links(ProbeContext& context) {
    const auto listing = co_await context.subject.sandbox().list_dir(".", context.paths.work);
    for (const auto& entry : listing) {
        if (entry.path == "link-file") {
            expect(entry.kind == EntryKind::symlink,
                   fmt::format("the listing named link-file a '{}', not 'symlink'",
                               to_string(entry.kind)));
            co_return;
        }
    }
    expect(false, fmt::format("the listing of . ({} entries) left out link-file", listing.size()));
}

const std::set<Capability> kOut{Capability::files_out};
const std::set<Capability> kOutList{Capability::files_out, Capability::files_list};

}  // namespace

const std::vector<ConformanceProbe>& files_out_probes() {
    static const std::vector<ConformanceProbe> probes{
        {"a-legitimate-read-still-works", kOut,
         "the positive control: a backend that refuses everything would pass every refusal probe",
         legitimate_read},
        {"a-link-is-named-a-link", kOut,
         "callers decide what to collect from stat, so a link must be described as a link with an "
         "unknown size rather than as its target",
         link_is_named},
        {"a-link-is-never-read", kOut,
         "reading a link would follow it to whatever it names, possibly a file outside the "
         "working directory",
         link_is_never_read},
        {"stat-through-a-linked-parent", kOut,
         "a parent directory that is a link lets a guest point a harmless-looking path at any "
         "file, so stat must refuse it",
         stat_through_linked_parent},
        {"read-through-a-linked-parent", kOut,
         "the classic escape: the guest links a directory to the outside and the host reads "
         "secrets through it",
         read_through_linked_parent},
        {"a-linked-working-directory", kOut,
         "the working directory itself may be the link, so the walk must include it and not start "
         "below it",
         linked_working_directory},
        {"a-linked-ancestor-of-the-working-directory", kOut,
         "a link above the working directory escapes just as well; the walk must start at the "
         "filesystem root",
         linked_ancestor_of_working_directory},
        {"a-plain-parent-is-not-an-escape", kOut,
         "a regular file used as a directory is a plain ENOTDIR, and must not be confused with a "
         "confinement escape",
         plain_parent_is_not_an_escape},
        {"listing-a-linked-directory", kOutList,
         "listing a linked directory would reveal the names of files outside the working "
         "directory",
         listing_linked_directory},
        {"listing-through-a-linked-parent", kOutList,
         "listing below a linked parent reaches outside just as a read does, so it needs the same "
         "walk",
         listing_through_linked_parent},
        {"listing-under-a-linked-ancestor", kOutList,
         "listing the working directory when one of its ancestors is a link must be refused, not "
         "answered from outside",
         listing_under_linked_ancestor},
        {"a-listing-names-its-links", kOutList,
         "a listing that hides links or reports them as files invites a caller to read through "
         "them",
         listing_names_its_links},
    };
    return probes;
}

}  // namespace maf_sandbox
