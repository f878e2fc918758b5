// A real Sandbox for protocol tests: commands run under this host's /bin/sh and files are this
// host's files. There is NO isolation (rung none): it exists so the shell-driven helpers
// (file transfer, host tools over exec, reclaim) and the IN/EXEC/DELETE conformance suites can run
// against a real shell. Never use it outside tests.
#pragma once

#include <string>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::testing {

// Guest paths are host absolute paths (the guest's root is the host's root). The base directory is
// a fresh temporary directory, removed with everything in it when the sandbox is destroyed.
//
// exec runs `/bin/sh -c <line>` (an argv is quoted with shell_join first) in its own session with
// a small fixed environment plus the request's; a timeout or an output overflow kills the whole
// process group. File methods work natively and confine every path with the lstat ancestor walk.
class HostShellSandbox : public Sandbox {
  public:
    HostShellSandbox();
    ~HostShellSandbox() override;
    HostShellSandbox(const HostShellSandbox&) = delete;
    HostShellSandbox& operator=(const HostShellSandbox&) = delete;

    std::string base_directory() const override { return base_; }

    Task<ExecResult> exec(ExecRequest request) override;
    // Not offered: throws NotImplemented.
    Task<ExecResult> run_code(std::string code, Seconds timeout) override;
    Task<void> write_file(std::string path, std::string content,
                          std::string working_directory) override;
    Task<std::optional<SandboxEntry>> stat_file(std::string path,
                                                std::string working_directory) override;
    Task<std::string> read_file(std::string path, std::string working_directory,
                                std::uint64_t max_bytes) override;
    Task<std::vector<SandboxEntry>> list_dir(std::string path,
                                             std::string working_directory) override;
    Task<void> remove(std::string path, std::string working_directory, bool recursive) override;
    Task<void> reclaim(std::string directory, std::string working_directory,
                       Seconds timeout) override;

  private:
    std::string working_directory_of(const std::string& working_directory) const;

    std::string base_;
};

}  // namespace maf_sandbox::testing
