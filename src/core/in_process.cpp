#include "maf_sandbox/core/in_process.hpp"

#include <fmt/format.h>

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
    resolve_working_directory(request.working_directory, base_directory_);
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

// The fake's primitives over its own stores; the base has confined and walked every path.
class InProcessFileOps final : public GuestFileOps {
  public:
    explicit InProcessFileOps(InProcessSandbox& sandbox) : sandbox_(sandbox) {}

    Task<std::optional<SandboxEntry>> stat(std::string absolute_path) override {
        co_return sandbox_.stat_absolute(absolute_path);
    }

    Task<void> write(std::string absolute_path, std::string content) override {
        sandbox_.non_regular_.erase(absolute_path);
        sandbox_.contents_[absolute_path] = std::move(content);
        co_return;
    }

    Task<std::string> read(std::string absolute_path, std::uint64_t) override {
        co_return sandbox_.contents_.at(absolute_path);
    }

    Task<std::vector<SandboxEntry>> list(std::string absolute_path) override {
        const auto prefix = descendant_prefix(absolute_path);
        std::set<std::string> children;
        auto collect = [&](const std::string& stored) {
            if (stored.starts_with(prefix) && stored.size() > prefix.size()) {
                const auto rest = stored.substr(prefix.size());
                children.insert(prefix + rest.substr(0, rest.find('/')));
            }
        };
        for (const auto& [stored, bytes] : sandbox_.contents_) {
            collect(stored);
        }
        for (const auto* store :
             {&sandbox_.symlinks_, &sandbox_.non_regular_, &sandbox_.directories_}) {
            for (const auto& stored : *store) {
                collect(stored);
            }
        }
        std::vector<SandboxEntry> listing;
        for (const auto& child : children) {
            listing.push_back(*sandbox_.stat_absolute(child));
        }
        co_return listing;
    }

    Task<void> remove(std::string absolute_path, const SandboxEntry& leaf, bool) override {
        switch (leaf.kind) {
            case EntryKind::symlink:
                sandbox_.symlinks_.erase(absolute_path);  // a link has no children: only it goes
                break;
            case EntryKind::file:
                sandbox_.contents_.erase(absolute_path);
                break;
            case EntryKind::other:
                sandbox_.non_regular_.erase(absolute_path);
                break;
            case EntryKind::directory:
                sandbox_.erase_tree(absolute_path);
                break;
        }
        co_return;
    }

  private:
    InProcessSandbox& sandbox_;
};

Task<void> InProcessSandbox::with_file_ops(FileWork work) {
    InProcessFileOps ops(*this);
    co_await work(ops);
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
