// FILES_DELETE suite (docs/protocol.md 6.5): removal removes exactly what was named, unlinks links
// without following them, and refuses anything outside or through a link. Each probe plants its
// own fixture and checks the result through exec.
#include <fmt/format.h>

#include "conformance_support.hpp"

namespace maf_sandbox {
namespace {

using conformance_detail::expect;
using conformance_detail::guest_test;
using conformance_detail::make_argv;
using conformance_detail::refused_with;
using conformance_detail::run_in_guest;

Task<void> expect_present(ProbeContext& context, std::string flag, std::string path,
                          std::string what) {
    const auto status = co_await guest_test(context, flag, path, "/");
    expect(status == 0,
           fmt::format("{} ({}) is gone: {}", path, flag == "-d" ? "a directory" : "a file", what));
}

Task<void> expect_gone(ProbeContext& context, std::string path, std::string what) {
    // `test -e` follows links, so a dangling link needs `test -L` as well.
    auto argv = make_argv({"sh", "-c", "test -e \"$1\" || test -L \"$1\"", "probe", path});
    const auto result = co_await run_in_guest(context, std::move(argv), "/");
    expect(result.exit_code != 0, fmt::format("{} is still there: {}", path, what));
}

Task<void> removal_removes(ProbeContext& context) {
    const auto& work = context.paths.work;
    co_await context.subject.plant_file(work + "/doomed.txt", "doomed");
    co_await context.subject.plant_file(work + "/bystander.txt", "bystander");
    co_await context.subject.sandbox().remove("doomed.txt", work, false);
    co_await expect_gone(context, work + "/doomed.txt", "the removal did nothing");
    co_await expect_present(context, "-f", work + "/bystander.txt",
                            "the removal took a bystander with it");
}

Task<void> missing_is_success(ProbeContext& context) {
    const auto& work = context.paths.work;
    co_await context.subject.plant_file(work + "/was-here.txt", "here");
    co_await context.subject.sandbox().remove("was-here.txt", work, false);
    co_await context.subject.sandbox().remove("was-here.txt", work, false);
}

Task<void> link_removed_not_followed(ProbeContext& context) {
    const auto& paths = context.paths;
    const auto target = paths.outside + "/target.txt";
    co_await context.subject.plant_file(target, "target");
    for (const auto& [name, recursive] :
         {std::pair<std::string, bool>{"link-out", false}, {"link-out-recursive", true}}) {
        co_await context.subject.plant_symlink(paths.work + "/" + name, target);
        co_await context.subject.sandbox().remove(name, paths.work, recursive);
        co_await expect_gone(context, paths.work + "/" + name,
                             fmt::format("removing the link (recursive={}) left it", recursive));
        const auto status =
            co_await guest_test(context, "-f", paths.beyond("target.txt"), paths.work);
        expect(status == 0,
               fmt::format("the link's target is gone: removing the link (recursive={}) "
                           "followed it",
                           recursive));
    }
}

Task<void> linked_parent_refused(ProbeContext& context) {
    const auto& paths = context.paths;
    const auto target = paths.outside + "/target.txt";
    co_await context.subject.plant_file(target, "target");
    co_await context.subject.plant_symlink(paths.linked_directory, paths.outside);
    for (const bool recursive : {false, true}) {
        co_await refused_with<ConfinementEscape>(
            "ConfinementEscape",
            fmt::format("removing link-dir/target.txt (recursive={})", recursive),
            context.subject.sandbox().remove("link-dir/target.txt", paths.work, recursive));
        co_await expect_present(context, "-f", target, "a refused removal deleted it anyway");
    }
}

Task<void> directory_needs_recursive(ProbeContext& context) {
    const auto& work = context.paths.work;
    co_await context.subject.plant_file(work + "/dir/keeps.txt", "keeps");
    co_await refused_with<FileError>("OSError", "removing the directory dir without recursive",
                                     context.subject.sandbox().remove("dir", work, false));
    co_await expect_present(context, "-f", work + "/dir/keeps.txt",
                            "a refused removal deleted the directory's file");
}

Task<void> empty_directory_needs_recursive(ProbeContext& context) {
    const auto& work = context.paths.work;
    auto argv = make_argv({"mkdir", "-p", "empty"});
    const auto made = co_await run_in_guest(context, std::move(argv), work);
    expect(made.exit_code == 0, fmt::format("`mkdir -p empty` exited {}", made.exit_code));
    co_await refused_with<FileError>("OSError", "removing the empty directory without recursive",
                                     context.subject.sandbox().remove("empty", work, false));
    co_await expect_present(context, "-d", work + "/empty",
                            "the refused removal took the empty directory anyway");
    co_await context.subject.sandbox().remove("empty", work, true);
    co_await expect_gone(context, work + "/empty", "a recursive removal left the directory");
}

Task<void> recursive_removes_tree(ProbeContext& context) {
    const auto& work = context.paths.work;
    co_await context.subject.plant_file(work + "/tree/leaf.txt", "leaf");
    co_await context.subject.plant_file(work + "/next-to-tree.txt", "sentinel");
    co_await context.subject.sandbox().remove("tree", work, true);
    co_await expect_gone(context, work + "/tree/leaf.txt", "the recursive removal left a leaf");
    co_await expect_gone(context, work + "/tree", "the recursive removal left the directory");
    co_await expect_present(context, "-f", work + "/next-to-tree.txt",
                            "the recursive removal took the file beside the tree");
}

Task<void> interior_link_unlinked(ProbeContext& context) {
    const auto& paths = context.paths;
    const auto target = paths.outside + "/interior-target.txt";
    co_await context.subject.plant_file(target, "interior");
    co_await context.subject.plant_file(paths.work + "/linked-tree/leaf.txt", "leaf");
    co_await context.subject.plant_symlink(paths.work + "/linked-tree/inside-link", target);
    co_await context.subject.sandbox().remove("linked-tree", paths.work, true);
    co_await expect_gone(context, paths.work + "/linked-tree",
                         "the recursive removal left the tree");
    co_await expect_present(context, "-f", target,
                            "the recursive removal followed the interior link");
}

Task<void> working_directory_refused(ProbeContext& context) {
    const auto& work = context.paths.work;
    co_await context.subject.plant_file(work + "/ground.txt", "ground");
    for (const bool recursive : {false, true}) {
        co_await refused_with<ConfinementEscape>(
            "ConfinementEscape", fmt::format("removing '.' (recursive={})", recursive),
            context.subject.sandbox().remove(".", work, recursive));
        co_await expect_present(context, "-f", work + "/ground.txt",
                                "a refused removal of the working directory emptied it");
    }
}

Task<void> path_outside_refused(ProbeContext& context) {
    const auto& paths = context.paths;
    const auto target = paths.outside + "/target.txt";
    co_await context.subject.plant_file(target, "target");
    for (const bool recursive : {false, true}) {
        co_await refused_with<ConfinementEscape>(
            "ConfinementEscape",
            fmt::format("removing {} (recursive={})", paths.beyond("target.txt"), recursive),
            context.subject.sandbox().remove(paths.beyond("target.txt"), paths.work, recursive));
        co_await expect_present(context, "-f", target, "a refused removal deleted it anyway");
    }
}

const std::set<Capability> kDeleteExec{Capability::files_delete, Capability::exec};
const std::set<Capability> kDelete{Capability::files_delete};

}  // namespace

const std::vector<ConformanceProbe>& files_delete_probes() {
    static const std::vector<ConformanceProbe> probes{
        {"a-removal-removes", kDeleteExec,
         "the positive control: a removal that does nothing would pass every refusal probe",
         removal_removes},
        {"a-missing-path-is-success", kDelete,
         "cleanup runs in finally blocks and retries, so removing what is already gone must "
         "succeed",
         missing_is_success},
        {"a-link-is-removed-never-followed", kDeleteExec,
         "removing a link must unlink it; following it would delete whatever it names outside",
         link_removed_not_followed},
        {"a-path-through-a-linked-parent-is-refused", kDeleteExec,
         "a linked parent would let the guest aim the host's removal at any file it can name",
         linked_parent_refused},
        {"a-directory-needs-recursive", kDeleteExec,
         "a tree must only disappear when the caller asked for a recursive removal explicitly",
         directory_needs_recursive},
        {"an-empty-directory-needs-recursive", kDeleteExec,
         "an implicit rmdir makes the outcome depend on contents the caller cannot see, so even "
         "empty ones need recursive",
         empty_directory_needs_recursive},
        {"recursive-removes-the-tree", kDeleteExec,
         "a recursive removal must take the whole tree and nothing beside it",
         recursive_removes_tree},
        {"a-link-inside-a-recursive-removal-is-unlinked-not-followed", kDeleteExec,
         "a recursive removal that descends through an interior link deletes files outside the "
         "working directory",
         interior_link_unlinked},
        {"the-working-directory-is-refused", kDeleteExec,
         "removing the working directory itself would destroy the whole call's state in one "
         "request",
         working_directory_refused},
        {"a-path-outside-is-refused", kDeleteExec,
         "a guest-chosen path that climbs out of the working directory must never be removed",
         path_outside_refused},
    };
    return probes;
}

}  // namespace maf_sandbox
