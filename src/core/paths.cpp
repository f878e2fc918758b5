#include "maf_sandbox/core/paths.hpp"

#include <fmt/format.h>

#include <cerrno>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox {
namespace {

std::vector<std::string_view> split_components(std::string_view path) {
    std::vector<std::string_view> parts;
    std::size_t start = 0;
    while (start <= path.size()) {
        const auto slash = path.find('/', start);
        const auto end = slash == std::string_view::npos ? path.size() : slash;
        parts.push_back(path.substr(start, end - start));
        if (slash == std::string_view::npos) {
            break;
        }
        start = slash + 1;
    }
    return parts;
}

bool is_absolute(std::string_view path) {
    return !path.empty() && path.front() == '/';
}

}  // namespace

std::string normpath(std::string_view path) {
    if (path.empty()) {
        return ".";
    }
    // POSIX leaves exactly two leading slashes implementation-defined, so Python keeps them.
    std::size_t initial_slashes = 0;
    if (path.starts_with("/")) {
        initial_slashes = path.starts_with("//") && !path.starts_with("///") ? 2 : 1;
    }
    std::vector<std::string_view> kept;
    for (const auto component : split_components(path)) {
        if (component.empty() || component == ".") {
            continue;
        }
        if (component != ".." || (initial_slashes == 0 && kept.empty()) ||
            (!kept.empty() && kept.back() == "..")) {
            kept.push_back(component);
        } else if (!kept.empty()) {
            kept.pop_back();
        }
    }
    std::string result(initial_slashes, '/');
    for (std::size_t i = 0; i < kept.size(); ++i) {
        if (i > 0) {
            result += '/';
        }
        result += kept[i];
    }
    return result.empty() ? "." : result;
}

std::string join_guest_path(std::string_view head, std::string_view tail) {
    if (is_absolute(tail)) {
        return std::string(tail);
    }
    std::string joined(head);
    if (!joined.empty() && !joined.ends_with('/')) {
        joined += '/';
    }
    joined += tail;
    return joined;
}

std::string guest_dirname(std::string_view path) {
    const auto slash = path.rfind('/');
    if (slash == std::string_view::npos) {
        return "";
    }
    std::string head(path.substr(0, slash + 1));
    if (head.find_first_not_of('/') != std::string::npos) {
        while (head.ends_with('/')) {
            head.pop_back();
        }
    }
    return head;
}

std::string confine_guest_path(std::string_view path, std::string_view working_directory) {
    if (path.find('\\') != std::string_view::npos) {
        throw ConfinementEscape(fmt::format(
            "guest path '{}' contains a backslash; guest paths are POSIX-shaped, use '/' between "
            "components",
            path));
    }
    if (path.find('\0') != std::string_view::npos ||
        working_directory.find('\0') != std::string_view::npos) {
        throw ConfinementEscape(
            "a guest path or working directory contains a NUL byte, which no guest file system "
            "can name; remove it");
    }
    // Guest paths are text (docs/protocol.md 3.1: paths are UTF-8); bytes that are not, overlong
    // forms of '/' and '.' included, are refused rather than passed to a file system that may read
    // them differently.
    if (!is_valid_utf8(path) || !is_valid_utf8(working_directory)) {
        throw ConfinementEscape(
            "a guest path or working directory is not valid UTF-8; guest paths are text, pass "
            "them as UTF-8");
    }
    const auto base = normpath(working_directory);
    auto resolved = normpath(join_guest_path(base, path));
    if (!guest_path_relative_to(resolved, base)) {
        throw ConfinementEscape(fmt::format(
            "guest path '{}' resolves to '{}', outside the working directory '{}'; use a path "
            "inside it",
            path, resolved, base));
    }
    return resolved;
}

std::optional<std::string> guest_path_relative_to(std::string_view path, std::string_view base) {
    const auto normal_path = normpath(path);
    const auto normal_base = normpath(base);
    if (normal_path == normal_base) {
        return std::string();
    }
    // A base that already ends in '/' (the root, or '//') is its own prefix.
    const auto prefix = normal_base.ends_with('/') ? normal_base : normal_base + "/";
    if (normal_path.starts_with(prefix)) {
        return normal_path.substr(prefix.size());
    }
    return std::nullopt;
}

std::vector<std::string> guest_directory_chain(std::string_view guest_path,
                                               std::string_view working_directory) {
    const auto base = normpath(working_directory);
    const auto target = normpath(join_guest_path(base, guest_path));
    std::vector<std::string> chain;
    std::string current = is_absolute(base) ? "/" : "";
    auto descend = [&](std::string_view relative) {
        for (const auto component : split_components(relative)) {
            if (component.empty() || component == ".") {
                continue;
            }
            current = join_guest_path(current, component);
            chain.push_back(current);
        }
    };
    if (const auto below_base = guest_path_relative_to(target, base)) {
        descend(base);
        descend(*below_base);
        return chain;
    }
    // The target is an ancestor of the working directory (the parent of the directory itself):
    // walk the target's own components, nothing below it.
    if (guest_path_relative_to(base, target)) {
        descend(target);
        return chain;
    }
    throw ConfinementEscape(
        fmt::format("guest path '{}' resolves to '{}', outside the working directory '{}'; use a "
                    "path inside it",
                    guest_path, target, base));
}

Task<void> refuse_symlinked_ancestors(NoFollowStat stat, std::string guest_path,
                                      std::string working_directory, bool include_self) {
    const auto resolved = normpath(join_guest_path(normpath(working_directory), guest_path));
    const auto walked = include_self ? resolved : guest_dirname(resolved);
    for (const auto& directory : guest_directory_chain(walked, working_directory)) {
        const auto entry = co_await stat(directory);
        if (!entry) {
            co_return;  // nothing below a missing directory exists, so nothing below can be a link
        }
        if (entry->kind == EntryKind::symlink) {
            throw ConfinementEscape(fmt::format(
                "guest path '{}' passes through '{}', which is a link; links are never followed, "
                "use the real directory",
                guest_path, directory));
        }
        if (entry->kind != EntryKind::directory) {
            throw NotADirectory(fmt::format("guest path '{}' passes through '{}', which is not a "
                                            "directory; fix the path",
                                            guest_path, directory),
                                ENOTDIR);
        }
    }
}

Task<GuestWriteTarget> confine_guest_write_target(NoFollowStat stat, std::string path,
                                                  std::string working_directory) {
    auto resolved = confine_guest_path(path, working_directory);
    if (resolved == normpath(working_directory)) {
        throw ConfinementEscape(fmt::format(
            "guest path '{}' names the working directory itself; name a file inside it", path));
    }
    co_await refuse_symlinked_ancestors(stat, resolved, working_directory);
    auto leaf = co_await stat(resolved);
    if (leaf && leaf->kind == EntryKind::symlink) {
        throw ConfinementEscape(fmt::format(
            "guest path '{}' is a link; links are never written through, remove it first", path));
    }
    co_return GuestWriteTarget{std::move(resolved), std::move(leaf)};
}

Task<std::string> confine_guest_write_path(NoFollowStat stat, std::string path,
                                           std::string working_directory) {
    auto target = co_await confine_guest_write_target(std::move(stat), std::move(path),
                                                      std::move(working_directory));
    co_return std::move(target.resolved);
}

std::string resolve_working_directory(std::string_view working_directory, std::string_view base) {
    if (working_directory.find('\0') != std::string_view::npos ||
        !is_valid_utf8(working_directory)) {
        throw InvalidArgument(
            "a working directory contains a NUL byte or is not valid UTF-8; pass a UTF-8 guest "
            "path without NUL");
    }
    if (working_directory.empty() || working_directory == ".") {
        return normpath(base);
    }
    return normpath(join_guest_path(base, working_directory));
}

std::string guest_call_path(std::string_view work_dir) {
    return join_guest_path(normpath(work_dir), random_hex(6));
}

}  // namespace maf_sandbox
