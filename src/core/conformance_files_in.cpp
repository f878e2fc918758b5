// FILES_IN suite (docs/protocol.md 6.3): writes land verbatim where asked and nowhere else. Each
// probe writes its own fixture and checks the result through exec, so most need EXEC as well.
#include <fmt/format.h>

#include "conformance_support.hpp"
#include "maf_sandbox/core/paths.hpp"

namespace maf_sandbox {
namespace {

using conformance_detail::expect;
using conformance_detail::guest_test;
using conformance_detail::make_argv;
using conformance_detail::refused_with;
using conformance_detail::run_in_guest;

Task<std::string> cat(ProbeContext& context, std::string path, std::string working_directory) {
    auto argv = make_argv({"cat", path});
    const auto result = co_await run_in_guest(context, std::move(argv), working_directory);
    expect(result.exit_code == 0,
           fmt::format("`cat {}` exited {}: {}", path, result.exit_code, result.stderr_text()));
    co_return result.stdout_bytes;
}

Task<void> write_lands(ProbeContext& context) {
    const auto& work = context.paths.work;
    co_await context.subject.sandbox().write_file(work + "/real/written.txt", "written", work);
    const auto status = co_await guest_test(context, "-f", "real/written.txt", work);
    expect(status == 0, "`test -f real/written.txt` failed: the write landed nowhere");
    const auto content = co_await cat(context, "real/written.txt", work);
    expect(content == "written",
           fmt::format("real/written.txt holds '{}', not 'written'", content));
}

Task<void> bytes_survive(ProbeContext& context) {
    const auto& work = context.paths.work;
    const auto payload = binary_payload();
    co_await context.subject.sandbox().write_file(work + "/binary.bin", payload, work);
    const auto content = co_await cat(context, "binary.bin", work);
    expect(content == payload, fmt::format("binary.bin holds {} bytes that differ from the {} "
                                           "written: bytes were translated",
                                           content.size(), payload.size()));
}

Task<void> text_is_utf8(ProbeContext& context) {
    const auto& work = context.paths.work;
    const std::string text = "na\xc3\xafve";
    co_await context.subject.sandbox().write_file("text.txt", text, work);
    const auto content = co_await cat(context, "text.txt", work);
    expect(content == text, fmt::format("text.txt holds '{}', not the UTF-8 of 'naïve'", content));
}

Task<void> second_write_replaces(ProbeContext& context) {
    auto& sandbox = context.subject.sandbox();
    const auto& work = context.paths.work;
    co_await sandbox.write_file("overwritten.txt", "first", work);
    co_await sandbox.write_file("overwritten.txt", "second", work);
    const auto content = co_await cat(context, "overwritten.txt", work);
    expect(content == "second",
           fmt::format("overwritten.txt holds '{}', not 'second': the write appended", content));
}

Task<void> parents_are_created(ProbeContext& context) {
    const auto& work = context.paths.work;
    co_await context.subject.sandbox().write_file(work + "/deep/er/est/leaf.txt", "leaf", work);
    const auto status = co_await guest_test(context, "-f", "deep/er/est/leaf.txt", work);
    expect(status == 0, "`test -f deep/er/est/leaf.txt` failed: missing parents were not created");
}

Task<void> expect_absent(ProbeContext& context, const std::string& absolute_path) {
    const auto status = co_await guest_test(context, "-e", absolute_path, "/");
    expect(status != 0, fmt::format("{} exists: the refused write landed anyway", absolute_path));
}

Task<void> path_outside_refused(ProbeContext& context) {
    const auto& paths = context.paths;
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "a write to " + paths.beyond("planted.txt"),
        context.subject.sandbox().write_file(paths.beyond("planted.txt"), "planted", paths.work));
    co_await expect_absent(context, paths.outside + "/planted.txt");
}

Task<void> prepare_linked_directory(ProbeContext& context) {
    const auto& paths = context.paths;
    co_await context.subject.sandbox().write_file(".probe-cwd", "", paths.work);
    co_await context.subject.plant_file(paths.outside + "/marker.txt", "marker\n");
    co_await context.subject.plant_symlink(paths.linked_directory, paths.outside);
}

Task<void> linked_parent_refused(ProbeContext& context) {
    const auto& paths = context.paths;
    co_await prepare_linked_directory(context);
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "a write to link-dir/landed.txt",
        context.subject.sandbox().write_file("link-dir/landed.txt", "landed", paths.work));
    co_await expect_absent(context, paths.outside + "/landed.txt");
}

Task<void> linked_destination_refused(ProbeContext& context) {
    const auto& paths = context.paths;
    const auto target = paths.outside + "/target.txt";
    co_await context.subject.sandbox().write_file(".probe-cwd", "", paths.work);
    co_await context.subject.plant_file(target, "known");
    co_await context.subject.plant_symlink(paths.linked_file, target);
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "a write to link-file",
        context.subject.sandbox().write_file("link-file", "changed", paths.work));
    const auto content = co_await cat(context, target, "/");
    expect(content == "known",
           fmt::format("the link's target now holds '{}': the write followed the link", content));
}

Task<void> working_directory_refused(ProbeContext& context) {
    const auto& work = context.paths.work;
    co_await context.subject.sandbox().write_file("control.txt", "control", work);
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "a write to '.'",
        context.subject.sandbox().write_file(".", "clobber", work));
    const auto status = co_await guest_test(context, "-e", "control.txt", work);
    expect(status == 0, "control.txt is gone: the refused write damaged the working directory");
}

Task<void> backslash_refused(ProbeContext& context) {
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "a write to sub\\file.txt",
        context.subject.sandbox().write_file("sub\\file.txt", "x", context.paths.work));
}

Task<void> linked_working_directory(ProbeContext& context) {
    const auto& paths = context.paths;
    co_await prepare_linked_directory(context);
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "a write to landed.txt in a linked working directory",
        context.subject.sandbox().write_file("landed.txt", "landed", paths.linked_directory));
    co_await expect_absent(context, paths.outside + "/landed.txt");
}

Task<void> linked_ancestor_of_working_directory(ProbeContext& context) {
    const auto& paths = context.paths;
    co_await prepare_linked_directory(context);
    co_await refused_with<ConfinementEscape>(
        "ConfinementEscape", "a write to landed.txt below a linked ancestor",
        context.subject.sandbox().write_file("landed.txt", "landed", paths.under_linked_directory));
    co_await expect_absent(context, paths.outside + "/sub/landed.txt");
}

const std::set<Capability> kInExec{Capability::files_in, Capability::exec};
const std::set<Capability> kIn{Capability::files_in};

}  // namespace

const std::vector<ConformanceProbe>& files_in_probes() {
    static const std::vector<ConformanceProbe> probes{
        {"a-write-lands-and-reads-back", kInExec,
         "the positive control: a write that silently lands nowhere would pass every refusal "
         "probe",
         write_lands},
        {"bytes-survive-the-round-trip", kInExec,
         "programs and archives break when a transfer translates newlines or re-encodes bytes on "
         "the way in",
         bytes_survive},
        {"str-content-is-utf8", kInExec,
         "text must arrive as UTF-8 whatever the guest's locale, or non-ASCII source files are "
         "corrupted",
         text_is_utf8},
        {"a-second-write-replaces", kInExec,
         "a write that appends leaves stale content behind and turns a retried call into garbage",
         second_write_replaces},
        {"parents-are-created", kInExec,
         "callers write nested trees in one call and must not have to create every directory "
         "first",
         parents_are_created},
        {"a-path-outside-is-refused", kInExec,
         "a guest-chosen path that climbs out of the working directory must never be written",
         path_outside_refused},
        {"a-path-through-a-linked-parent-is-refused", kInExec,
         "a linked parent directory would let the guest redirect the host's write anywhere it "
         "likes",
         linked_parent_refused},
        {"a-linked-destination-is-refused-not-followed", kInExec,
         "writing through a linked leaf would overwrite the link's target, which may be outside "
         "the working directory",
         linked_destination_refused},
        {"the-working-directory-is-refused", kInExec,
         "writing the working directory itself would replace the directory that holds the whole "
         "call's files",
         working_directory_refused},
        {"a-backslash-is-refused", kIn,
         "a backslash means a Windows-shaped path that POSIX confinement arithmetic cannot judge "
         "safely",
         backslash_refused},
        {"a-linked-working-directory", kInExec,
         "when the working directory itself is a link, every write inside it lands outside",
         linked_working_directory},
        {"a-linked-ancestor-of-the-working-directory", kInExec,
         "a link above the working directory redirects every write below it, so the walk starts "
         "at the root",
         linked_ancestor_of_working_directory},
    };
    return probes;
}

}  // namespace maf_sandbox
