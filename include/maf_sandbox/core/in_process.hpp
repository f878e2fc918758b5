// An in-process fake backend (isolation none) for tests and the default demo (docs/protocol.md 7).
// Files live in memory; exec and run_code are scripted, never executed. Every path method confines
// through the ConfinedSandbox base exactly as a real backend does, so it answers the FILES_OUT
// conformance probes.
// What it cannot model: a planted link has no target, so green here means the shape of the
// refusals is right, not that a real guest is safe.
//
// Single-threaded by design: use one sandbox from one io_context at a time.
#pragma once

#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "maf_sandbox/core/confined_sandbox.hpp"
#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

// A seeded entry: bytes for a regular file, or the kind of a non-file entry (symlink, directory,
// other).
using SeedEntry = std::variant<std::string, EntryKind>;

struct InProcessSandboxOptions {
    // Scripted answers: the first marker (in this order) that is a substring of the command line
    // (or program text) decides the result.
    std::vector<std::pair<std::string, ExecResult>> outputs;
    // When set, exec and run_code record the call and then throw this.
    std::exception_ptr raises;
    // Stdout of a command that matches no marker.
    std::string default_stdout;
    // Absolute guest path -> entry.
    std::vector<std::pair<std::string, SeedEntry>> seed_files;
    // The storage base relative working directories resolve beneath.
    std::string base_directory = kDefaultWorkDir;
};

struct RecordedCommand {
    std::string command;  // argv joined with POSIX shell quoting, or the shell string as given
    std::string working_directory;
    Seconds timeout{0.0};
};

struct RecordedProgram {
    std::string code;
    Seconds timeout{0.0};
};

class InProcessSandbox : public ConfinedSandbox {
  public:
    explicit InProcessSandbox(InProcessSandboxOptions options = {});

    std::string base_directory() const override { return base_directory_; }
    // The backend points the shared sandbox at the acquiring spec's work dir.
    void set_base_directory(std::string base) { base_directory_ = std::move(base); }

    Task<ExecResult> exec(ExecRequest request) override;
    Task<ExecResult> run_code(std::string code, Seconds timeout) override;
    // The fake does not declare reclaim: throws NotImplemented before doing anything.
    Task<void> reclaim(std::string directory, std::string working_directory,
                       Seconds timeout) override;

    // The stores, by absolute normalised guest path. Tests and conformance subjects plant into
    // them directly; directories are also implied by any stored descendant.
    std::map<std::string, std::string>& contents() noexcept { return contents_; }
    std::set<std::string>& symlinks() noexcept { return symlinks_; }
    std::set<std::string>& non_regular() noexcept { return non_regular_; }
    std::set<std::string>& directories() noexcept { return directories_; }

    const std::vector<RecordedCommand>& commands() const noexcept { return commands_; }
    const std::vector<RecordedProgram>& programs() const noexcept { return programs_; }

    // The unconfined, no-follow stat every path method walks with (path relative to `/`).
    std::optional<SandboxEntry> stat_absolute(const std::string& absolute_path) const;

  protected:
    // In place, over the stores: the fake has no thread to hop to.
    Task<void> with_file_ops(FileWork work) override;

  private:
    friend class InProcessFileOps;

    ExecResult scripted(const std::string& text) const;
    bool has_descendant(const std::string& absolute_path) const;
    void erase_tree(const std::string& absolute_path);

    InProcessSandboxOptions options_;
    std::string base_directory_;
    std::map<std::string, std::string> contents_;
    std::set<std::string> symlinks_;
    std::set<std::string> non_regular_;
    std::set<std::string> directories_;
    std::vector<RecordedCommand> commands_;
    std::vector<RecordedProgram> programs_;
};

// What the fake declares by default for this project: file transfer both ways, listing and
// deletion, but not exec (its exec is scripted), egress {allowlist, closed}, both isolation scopes.
BackendDeclarations in_process_default_declarations();

struct InProcessBackendOptions {
    std::string name = "in-process";
    Isolation isolation = Isolation::none;
    BackendDeclarations declarations = in_process_default_declarations();
    // When set, acquire throws it and records nothing.
    std::exception_ptr acquire_error;
    // What dispose_scope reports as disposed.
    int purge_count = 1;
};

struct RecordedDisposal {
    SandboxKey key;
    std::optional<std::string> kind;
};

// Hands every key the one shared InProcessSandbox and records what it was asked. Every declaration
// is overridable, so router policy tests use it as a fixture.
class InProcessSandboxBackend : public SandboxBackend {
  public:
    explicit InProcessSandboxBackend(std::shared_ptr<InProcessSandbox> sandbox = nullptr,
                                     InProcessBackendOptions options = {});

    std::string name() const override { return options_.name; }
    Isolation isolation() const override { return options_.isolation; }
    BackendDeclarations declarations() const override { return options_.declarations; }

    // Records the key and spec, points the sandbox's base at the spec's work dir and returns it.
    Task<std::shared_ptr<Sandbox>> acquire(SandboxKey key, SandboxSpec spec) override;
    Task<std::optional<DisposalFailure>> dispose(SandboxKey key,
                                                 std::optional<std::string> kind) override;
    Task<ScopePurge> dispose_scope(std::string scope, std::string thread_id) override;
    Task<void> close() override;

    const std::shared_ptr<InProcessSandbox>& sandbox() const noexcept { return sandbox_; }
    const std::vector<SandboxKey>& keys() const noexcept { return keys_; }
    const std::vector<SandboxSpec>& specs() const noexcept { return specs_; }
    const std::vector<RecordedDisposal>& disposed() const noexcept { return disposed_; }
    const std::vector<std::pair<std::string, std::string>>& purged() const noexcept {
        return purged_;
    }
    bool closed() const noexcept { return closed_; }
    void set_purge_count(int count) noexcept { options_.purge_count = count; }

  private:
    std::shared_ptr<InProcessSandbox> sandbox_;
    InProcessBackendOptions options_;
    std::vector<SandboxKey> keys_;
    std::vector<SandboxSpec> specs_;
    std::vector<RecordedDisposal> disposed_;
    std::vector<std::pair<std::string, std::string>> purged_;
    bool closed_ = false;
};

}  // namespace maf_sandbox
