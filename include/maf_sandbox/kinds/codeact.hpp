// The `codeact` kind: runs a Python program the model wrote, in a sandbox whose spec the host
// configured. Input files come only from the host's FileStore (a name absent from its listing is
// refused before any sandbox is touched); declared outputs land to the host's sink with the spec's
// caps. Each call works in its own guest directory `{work_dir}/{12 hex}`, cleaned up in a finally.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/kinds/file_store.hpp"
#include "maf_sandbox/kinds/settings.hpp"
#include "maf_sandbox/kinds/tool_result.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::kinds {

inline constexpr const char* kCodeActKind = "codeact";
inline constexpr const char* kCodeActToolName = "execute_code";
// The program's file name inside the call directory; an input file may not take it.
inline constexpr const char* kProgramFileName = "program.py";

struct CodeActConfig {
    SandboxSettings sandbox;
    // Files the program writes in its working directory (the call directory) that land to the
    // host's output sink. Paths are literal, relative to the call directory.
    std::vector<DeclaredOutput> outputs;
    // Names or globs (output_patterns.hpp's rules) collected after every successful call, in
    // addition to the call's own; they land through the caller's sink (CallerContext) or the
    // tool's. Missing matches are reported, never an error.
    std::vector<std::string> output_patterns;
    // Whether a call may name its own outputs (CodeActArguments::outputs).
    bool outputs_per_call = false;
};

// What the model supplies: nothing else exists, so no argument can reach the sandbox key.
struct CodeActArguments {
    std::string code;
    std::vector<std::string> input_files;
    // Names or globs of files the program writes in its working directory to hand back (only
    // when the host set CodeActConfig::outputs_per_call), capped by the spec's files_out.
    std::vector<std::string> outputs;
};

// The spec the codeact kind asks for: kind "codeact", egress from the host's hosts (allowlist) or
// closed, requires {exec, files_in} (+files_out when outputs are declared or named by pattern or
// per call, which also sets outputs_named_at_call_time).
SandboxSpec codeact_spec(const CodeActConfig& config);

class CodeActTool {
  public:
    // Builds the spec and checks it at attach time: throws SandboxOutputSinkRequired when outputs
    // are declared without a sink (outputs named by pattern or per call may instead land through
    // each caller's sink), InvalidArgument for a bad setting, and whatever
    // router->ensure_can_serve throws (a policy refusal) when the router cannot serve the spec.
    CodeActTool(std::shared_ptr<SandboxRouter> router, CodeActConfig config,
                std::shared_ptr<const FileStore> store, std::optional<OutputSink> sink,
                std::shared_ptr<spdlog::logger> log);
    ~CodeActTool();
    CodeActTool(const CodeActTool&) = delete;
    CodeActTool& operator=(const CodeActTool&) = delete;

    const SandboxSpec& spec() const;
    ResultProvenance provenance() const;
    const CodeActConfig& config() const;
    const FileStore& store() const;

    // Runs `arguments.code` as `python3 <call>/program.py` with the call directory as working
    // directory, after copying the named store files into it. Never throws except cancellation
    // (a cancelled call still cleans up): refusals and failures come back as a ToolResult with a
    // fixed sentence.
    Task<ToolResult> execute_code(CallerContext caller, CodeActArguments arguments,
                                  ProgressReporter progress = {});

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace maf_sandbox::kinds
