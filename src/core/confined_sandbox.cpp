#include "maf_sandbox/core/confined_sandbox.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"

namespace maf_sandbox {
namespace {

NoFollowStat stat_through(GuestFileOps& ops) {
    return [&ops](std::string absolute_path) { return ops.stat(std::move(absolute_path)); };
}

// The leaf checks of a read, in the order the protocol lists them: absent, a link (never read
// through), a directory, anything else that is not a regular file, a size the backend could not
// vouch for, then the cap (refused, never truncated).
void refuse_unreadable(const std::optional<SandboxEntry>& leaf, const std::string& path,
                       std::uint64_t max_bytes) {
    if (!leaf) {
        throw FileNotFound(fmt::format("cannot read '{}': no such file; check the path", path),
                           ENOENT);
    }
    switch (leaf->kind) {
        case EntryKind::file:
            break;
        case EntryKind::symlink:
            throw FileError(fmt::format("refusing to read '{}': it is a link and links are never "
                                        "followed; read the real file",
                                        path),
                            ELOOP);
        case EntryKind::directory:
            throw IsADirectory(
                fmt::format("cannot read '{}': it is a directory; name a file instead", path),
                EISDIR);
        case EntryKind::other:
            throw FileError(fmt::format(
                "refusing to read '{}': it is not a regular file; only regular files are read",
                path));
    }
    if (!leaf->size_bytes) {
        throw SandboxOutputSizeUnknown(fmt::format(
            "the backend did not report a trustworthy size for '{}'; refusing to read it", path));
    }
    if (*leaf->size_bytes > max_bytes) {
        throw SandboxTransferCapExceeded(
            fmt::format("refusing to read '{}': it holds {} bytes, over the cap of {}; raise the "
                        "cap or produce a smaller file",
                        path, *leaf->size_bytes, max_bytes));
    }
}

}  // namespace

std::string entry_path_relative_to(const std::string& absolute,
                                   const std::string& working_directory) {
    return guest_path_relative_to(absolute, working_directory).value_or(absolute);
}

// Each method parks its work in a named FileWork before the co_await: GCC 12 destroys a callable
// temporary of a co_await expression twice.

Task<void> ConfinedSandbox::write_file(std::string path, std::string content,
                                       std::string working_directory) {
    FileWork work = [&](GuestFileOps& ops) -> Task<void> {
        const auto wd = resolve_working_directory(working_directory, base_directory());
        const auto stat = stat_through(ops);
        // Refuses the working directory itself, a linked ancestor and a final link.
        auto target = co_await confine_guest_write_target(stat, path, wd);
        if (target.leaf && target.leaf->kind == EntryKind::directory) {
            throw IsADirectory(
                fmt::format("cannot write '{}': it is a directory; name a file instead", path),
                EISDIR);
        }
        co_await ops.write(std::move(target.resolved), std::move(content));
    };
    auto task = with_file_ops(std::move(work));
    co_await std::move(task);
}

Task<std::optional<SandboxEntry>> ConfinedSandbox::stat_file(std::string path,
                                                             std::string working_directory) {
    std::optional<SandboxEntry> entry;
    FileWork work = [&](GuestFileOps& ops) -> Task<void> {
        const auto wd = resolve_working_directory(working_directory, base_directory());
        const auto absolute = confine_guest_path(path, wd);
        co_await refuse_symlinked_ancestors(stat_through(ops), absolute, wd);
        entry = co_await ops.stat(absolute);
        if (entry) {
            entry->path = entry_path_relative_to(absolute, wd);
        }
    };
    auto task = with_file_ops(std::move(work));
    co_await std::move(task);
    co_return entry;
}

Task<std::string> ConfinedSandbox::read_file(std::string path, std::string working_directory,
                                             std::uint64_t max_bytes) {
    std::string bytes;
    FileWork work = [&](GuestFileOps& ops) -> Task<void> {
        const auto wd = resolve_working_directory(working_directory, base_directory());
        const auto absolute = confine_guest_path(path, wd);
        co_await refuse_symlinked_ancestors(stat_through(ops), absolute, wd);
        refuse_unreadable(co_await ops.stat(absolute), path, max_bytes);
        bytes = co_await ops.read(absolute, max_bytes);
    };
    auto task = with_file_ops(std::move(work));
    co_await std::move(task);
    co_return bytes;
}

Task<std::vector<SandboxEntry>> ConfinedSandbox::list_dir(std::string path,
                                                          std::string working_directory) {
    std::vector<SandboxEntry> entries;
    FileWork work = [&](GuestFileOps& ops) -> Task<void> {
        const auto wd = resolve_working_directory(working_directory, base_directory());
        const auto absolute = confine_guest_path(path, wd);
        // The listed directory is walked too: a link or a file there is refused by the walk.
        co_await refuse_symlinked_ancestors(stat_through(ops), absolute, wd, /*include_self=*/true);
        const auto self = co_await ops.stat(absolute);
        if (!self) {
            throw FileNotFound(
                fmt::format("cannot list '{}': no such directory; check the path", path), ENOENT);
        }
        if (self->kind != EntryKind::directory) {
            throw NotADirectory(
                fmt::format("cannot list '{}': it is not a directory; name a directory", path),
                ENOTDIR);
        }
        entries = co_await ops.list(absolute);
        for (auto& entry : entries) {
            entry.path = entry_path_relative_to(entry.path, wd);
        }
        std::sort(entries.begin(), entries.end(),
                  [](const SandboxEntry& a, const SandboxEntry& b) { return a.path < b.path; });
    };
    auto task = with_file_ops(std::move(work));
    co_await std::move(task);
    co_return entries;
}

Task<void> ConfinedSandbox::remove(std::string path, std::string working_directory,
                                   bool recursive) {
    FileWork work = [&](GuestFileOps& ops) -> Task<void> {
        const auto wd = resolve_working_directory(working_directory, base_directory());
        const auto absolute = confine_guest_path(path, wd);
        if (absolute == wd) {
            throw ConfinementEscape(
                fmt::format("refusing to remove '{}': it names the working directory itself; "
                            "name a path inside it",
                            path));
        }
        co_await refuse_symlinked_ancestors(stat_through(ops), absolute, wd);
        const auto leaf = co_await ops.stat(absolute);
        if (!leaf) {
            co_return;  // already gone: removal is idempotent
        }
        if (leaf->kind == EntryKind::directory && !recursive) {
            throw IsADirectory(fmt::format("refusing to remove '{}': it is a directory; pass "
                                           "recursive to remove it and everything in it",
                                           path),
                               EISDIR);
        }
        co_await ops.remove(absolute, *leaf, recursive);
    };
    auto task = with_file_ops(std::move(work));
    co_await std::move(task);
}

}  // namespace maf_sandbox
