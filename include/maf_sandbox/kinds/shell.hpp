// The `shell` kind: runs a POSIX command line in a sandbox whose spec (image, egress, limits) the
// host configured. The command is a shell string handed to the guest's shell, with the call's own
// directory `{work_dir}/{12 hex}` as working directory, cleaned up in a finally.
#pragma once

#include <memory>
#include <string>

#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/kinds/settings.hpp"
#include "maf_sandbox/kinds/tool_result.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::kinds {

inline constexpr const char* kShellKind = "shell";
inline constexpr const char* kShellToolName = "run_shell";

struct ShellConfig {
    SandboxSettings sandbox;
};

// kind "shell", egress from the host's hosts (allowlist) or closed, requires {exec}.
SandboxSpec shell_spec(const ShellConfig& config);

class ShellTool {
  public:
    // Throws InvalidArgument for a bad setting, and whatever router->ensure_can_serve throws when
    // the router cannot serve the spec.
    ShellTool(std::shared_ptr<SandboxRouter> router, ShellConfig config,
              std::shared_ptr<spdlog::logger> log);
    ~ShellTool();
    ShellTool(const ShellTool&) = delete;
    ShellTool& operator=(const ShellTool&) = delete;

    const SandboxSpec& spec() const;
    ResultProvenance provenance() const;
    const ShellConfig& config() const;

    // Creates the call directory, runs `command` there through the guest's shell and returns the
    // command's own output and exit code. Never throws except cancellation (a cancelled call still
    // cleans up).
    Task<ToolResult> run_shell(CallerContext caller, std::string command,
                               ProgressReporter progress = {});

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace maf_sandbox::kinds
