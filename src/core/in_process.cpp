#include "maf_sandbox/core/in_process.hpp"

#include <fmt/format.h>

#include <cerrno>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox {
namespace {

std::string descendant_prefix(const std::string& absolute_path) {
    return absolute_path.ends_with('/') ? absolute_path : absolute_path + "/";
}

template <typename Store>
bool store_has_descendant(const Store& store, const std::string& prefix) {
    const auto it = store.lower_bound(prefix);
    if (it == store.end()) {
        return false;
    }
    if constexpr (std::is_same_v<Store, std::map<std::string, std::string>>) {
        return it->first.starts_with(prefix);
    } else {
        return it->starts_with(prefix);
    }
}

template <typename Store>
void erase_under(Store& store, const std::string& path, const std::string& prefix) {
    for (auto it = store.begin(); it != store.end();) {
        const std::string& key = [&]() -> const std::string& {
            if constexpr (std::is_same_v<Store, std::map<std::string, std::string>>) {
                return it->first;
            } else {
                return *it;
            }
        }();
        if (key == path || key.starts_with(prefix)) {
            it = store.erase(it);
        } else {
            ++it;
        }
    }
}

}  // namespace

InProcessSandbox::InProcessSandbox(InProcessSandboxOptions options)
    : options_(std::move(options)), base_directory_(normpath(options_.base_directory)) {
    for (const auto& [raw_path, entry] : options_.seed_files) {
        const auto path = normpath(raw_path);
        if (const auto* bytes = std::get_if<std::string>(&entry)) {
            contents_[path] = *bytes;
            continue;
        }
        switch (std::get<EntryKind>(entry)) {
            case EntryKind::symlink:
                symlinks_.insert(path);
                break;
            case EntryKind::directory:
                directories_.insert(path);
                break;
            case EntryKind::file:
                contents_[path] = "";
                break;
            case EntryKind::other:
                non_regular_.insert(path);
                break;
        }
    }
}

std::optional<SandboxEntry> InProcessSandbox::stat_absolute(
    const std::string& absolute_path) const {
    const auto path = normpath(absolute_path);
    if (symlinks_.count(path) > 0) {
        return SandboxEntry{path, EntryKind::symlink, std::nullopt};
    }
    if (non_regular_.count(path) > 0) {
        return SandboxEntry{path, EntryKind::other, std::nullopt};
    }
    if (const auto it = contents_.find(path); it != contents_.end()) {
        return SandboxEntry{path, EntryKind::file, it->second.size()};
    }
    if (path == "/" || directories_.count(path) > 0 || has_descendant(path)) {
        return SandboxEntry{path, EntryKind::directory, std::nullopt};
    }
    return std::nullopt;
}

bool InProcessSandbox::has_descendant(const std::string& absolute_path) const {
    const auto prefix = descendant_prefix(absolute_path);
    return store_has_descendant(contents_, prefix) || store_has_descendant(symlinks_, prefix) ||
           store_has_descendant(non_regular_, prefix) || store_has_descendant(directories_, prefix);
}

void InProcessSandbox::erase_tree(const std::string& absolute_path) {
    const auto prefix = descendant_prefix(absolute_path);
    erase_under(contents_, absolute_path, prefix);
    erase_under(symlinks_, absolute_path, prefix);
    erase_under(non_regular_, absolute_path, prefix);
    erase_under(directories_, absolute_path, prefix);
}

std::string InProcessSandbox::working_directory_of(const std::string& working_directory) const {
    return resolve_working_directory(working_directory, base_directory_);
}

ExecResult InProcessSandbox::scripted(const std::string& text) const {
    for (const auto& [marker, result] : options_.outputs) {
        if (text.find(marker) != std::string::npos) {
            return result;
        }
    }
    return ExecResult{options_.default_stdout, "", 0};
}

Task<ExecResult> InProcessSandbox::exec(ExecRequest request) {
    // Refuses a NUL or invalid UTF-8 working directory before recording, as a real backend does.
    working_directory_of(request.working_directory);
    std::string line;
    if (const auto* argv = std::get_if<Argv>(&request.command)) {
        line = shell_join(*argv);
    } else {
        line = std::get<std::string>(request.command);
    }
    commands_.push_back({line, request.working_directory, request.timeout});
    if (options_.raises) {
        std::rethrow_exception(options_.raises);
    }
    co_return scripted(line);
}

Task<ExecResult> InProcessSandbox::run_code(std::string code, Seconds timeout) {
    programs_.push_back({code, timeout});
    if (options_.raises) {
        std::rethrow_exception(options_.raises);
    }
    co_return scripted(code);
}

namespace {

// The no-follow stat the confinement helpers walk with, over the fake's own stores.
NoFollowStat stat_of(const InProcessSandbox& sandbox) {
    return [&sandbox](std::string path) -> Task<std::optional<SandboxEntry>> {
        co_return sandbox.stat_absolute(path);
    };
}

}  // namespace

Task<void> InProcessSandbox::write_file(std::string path, std::string content,
                                        std::string working_directory) {
    const auto wd = working_directory_of(working_directory);
    const auto resolved = co_await confine_guest_write_path(stat_of(*this), path, wd);
    const auto existing = stat_absolute(resolved);
    if (existing && existing->kind == EntryKind::directory) {
        throw IsADirectory(
            fmt::format("cannot write '{}': it is a directory; name a file instead", path), EISDIR);
    }
    non_regular_.erase(resolved);
    contents_[resolved] = std::move(content);
}

Task<std::optional<SandboxEntry>> InProcessSandbox::stat_file(std::string path,
                                                              std::string working_directory) {
    const auto wd = working_directory_of(working_directory);
    const auto resolved = confine_guest_path(path, wd);
    co_await refuse_symlinked_ancestors(stat_of(*this), resolved, wd);
    auto entry = stat_absolute(resolved);
    if (entry) {
        entry->path = guest_path_relative_to(resolved, wd).value_or(resolved);
    }
    co_return entry;
}

Task<std::string> InProcessSandbox::read_file(std::string path, std::string working_directory,
                                              std::uint64_t max_bytes) {
    const auto wd = working_directory_of(working_directory);
    const auto resolved = confine_guest_path(path, wd);
    co_await refuse_symlinked_ancestors(stat_of(*this), resolved, wd);
    const auto entry = stat_absolute(resolved);
    if (!entry) {
        throw FileNotFound(fmt::format("cannot read '{}': no such file; check the path", path),
                           ENOENT);
    }
    switch (entry->kind) {
        case EntryKind::file:
            break;
        case EntryKind::directory:
            throw IsADirectory(
                fmt::format("cannot read '{}': it is a directory; name a file instead", path),
                EISDIR);
        case EntryKind::symlink:
            throw FileError(fmt::format("refusing to read '{}': it is a link and links are never "
                                        "followed; read the real file",
                                        path),
                            ELOOP);
        case EntryKind::other:
            throw FileError(
                fmt::format("refusing to read '{}': it is not a regular file; only "
                            "regular files are read",
                            path));
    }
    const auto& bytes = contents_.at(resolved);
    if (bytes.size() > max_bytes) {
        throw SandboxTransferCapExceeded(
            fmt::format("refusing to read '{}': it holds {} bytes, over the cap of {}; raise the "
                        "cap or produce a smaller file",
                        path, bytes.size(), max_bytes));
    }
    co_return bytes;
}

Task<std::vector<SandboxEntry>> InProcessSandbox::list_dir(std::string path,
                                                           std::string working_directory) {
    const auto wd = working_directory_of(working_directory);
    const auto resolved = confine_guest_path(path, wd);
    co_await refuse_symlinked_ancestors(stat_of(*this), resolved, wd, /*include_self=*/true);
    const auto entry = stat_absolute(resolved);
    if (!entry) {
        throw FileNotFound(fmt::format("cannot list '{}': no such directory; check the path", path),
                           ENOENT);
    }
    if (entry->kind != EntryKind::directory) {
        throw NotADirectory(
            fmt::format("cannot list '{}': it is not a directory; name a directory", path),
            ENOTDIR);
    }
    const auto prefix = descendant_prefix(resolved);
    std::set<std::string> children;
    auto collect = [&](const std::string& stored) {
        if (stored.starts_with(prefix) && stored.size() > prefix.size()) {
            const auto rest = stored.substr(prefix.size());
            children.insert(prefix + rest.substr(0, rest.find('/')));
        }
    };
    for (const auto& [stored, bytes] : contents_) {
        collect(stored);
    }
    for (const auto* store : {&symlinks_, &non_regular_, &directories_}) {
        for (const auto& stored : *store) {
            collect(stored);
        }
    }
    std::vector<SandboxEntry> listing;
    for (const auto& child : children) {
        auto child_entry = stat_absolute(child);
        child_entry->path = guest_path_relative_to(child, wd).value_or(child);
        listing.push_back(std::move(*child_entry));
    }
    std::sort(listing.begin(), listing.end(),
              [](const SandboxEntry& a, const SandboxEntry& b) { return a.path < b.path; });
    co_return listing;
}

Task<void> InProcessSandbox::remove(std::string path, std::string working_directory,
                                    bool recursive) {
    const auto wd = working_directory_of(working_directory);
    const auto resolved = confine_guest_path(path, wd);
    if (resolved == wd) {
        throw ConfinementEscape(fmt::format(
            "refusing to remove '{}': it names the working directory itself; name a path inside it",
            path));
    }
    co_await refuse_symlinked_ancestors(stat_of(*this), resolved, wd);
    const auto entry = stat_absolute(resolved);
    if (!entry) {
        co_return;  // already gone: removal is idempotent
    }
    switch (entry->kind) {
        case EntryKind::symlink:
            symlinks_.erase(resolved);  // a link has no children: only the link goes
            co_return;
        case EntryKind::file:
            contents_.erase(resolved);
            co_return;
        case EntryKind::other:
            non_regular_.erase(resolved);
            co_return;
        case EntryKind::directory:
            break;
    }
    if (!recursive) {
        throw FileError(fmt::format("refusing to remove '{}': it is a directory; pass recursive "
                                    "to remove it and everything in it",
                                    path),
                        EISDIR);
    }
    erase_tree(resolved);
}

Task<void> InProcessSandbox::reclaim(std::string directory, std::string, Seconds) {
    throw NotImplemented(fmt::format(
        "the in-process sandbox does not declare reclaim, so '{}' was left alone; dispose the "
        "sandbox to clean up instead",
        directory));
    co_return;
}

BackendDeclarations in_process_default_declarations() {
    BackendDeclarations declarations;
    declarations.capabilities = {Capability::files_in, Capability::files_out,
                                 Capability::files_list, Capability::files_delete};
    declarations.egress_modes = {Egress::allowlist, Egress::closed};
    declarations.isolation_scopes = {IsolationScope::conversation, IsolationScope::call};
    return declarations;
}

InProcessSandboxBackend::InProcessSandboxBackend(std::shared_ptr<InProcessSandbox> sandbox,
                                                 InProcessBackendOptions options)
    : sandbox_(sandbox ? std::move(sandbox) : std::make_shared<InProcessSandbox>()),
      options_(std::move(options)) {}

Task<std::shared_ptr<Sandbox>> InProcessSandboxBackend::acquire(SandboxKey key, SandboxSpec spec) {
    if (options_.acquire_error) {
        std::rethrow_exception(options_.acquire_error);
    }
    if (closed_) {
        throw Error(fmt::format("backend '{}' is closed and refuses new work; create a new one",
                                options_.name));
    }
    sandbox_->set_base_directory(normpath(spec.work_dir_or_default()));
    keys_.push_back(std::move(key));
    specs_.push_back(std::move(spec));
    co_return sandbox_;
}

Task<std::optional<DisposalFailure>> InProcessSandboxBackend::dispose(
    SandboxKey key, std::optional<std::string> kind) {
    disposed_.push_back({std::move(key), std::move(kind)});
    co_return std::nullopt;
}

Task<ScopePurge> InProcessSandboxBackend::dispose_scope(std::string scope, std::string thread_id) {
    purged_.emplace_back(std::move(scope), std::move(thread_id));
    co_return ScopePurge{options_.purge_count, std::nullopt};
}

Task<void> InProcessSandboxBackend::close() {
    closed_ = true;
    co_return;
}

}  // namespace maf_sandbox
