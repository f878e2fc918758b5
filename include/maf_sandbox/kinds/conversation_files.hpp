// Files moved between a host's client and a conversation's sandbox: `upload_file` writes bytes the
// client sent, `download_file` reads a file back. Both reach the sandbox a kind's calls use (the
// same key and spec), so a program finds what was uploaded and a download finds what a program
// left. Every path is relative to that sandbox's work directory (the parent of each call's own
// directory) and goes through the backend's confined file operations; the spec's files_in and
// files_out caps bound each file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/kinds/tool_result.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::kinds {

inline constexpr const char* kUploadToolName = "upload_file";
inline constexpr const char* kDownloadToolName = "download_file";

struct FileToolResult {
    ResultProvenance provenance;
    CallFailure failure = CallFailure::none;
    // The fixed sentence for a failure, or what was done.
    std::string message;
    // Where the file is in the sandbox (absolute), when the path was valid.
    std::string guest_path;
    // A download's bytes.
    std::string content;
    std::uint64_t size = 0;

    bool is_error() const { return failure != CallFailure::none; }
};

class ConversationFiles {
  public:
    // `spec` is the spec of the kind whose sandbox the files belong to (codeact_spec). Throws
    // InvalidArgument without a router or a logger.
    ConversationFiles(std::shared_ptr<SandboxRouter> router, SandboxSpec spec,
                      std::shared_ptr<spdlog::logger> log);
    ~ConversationFiles();
    ConversationFiles(const ConversationFiles&) = delete;
    ConversationFiles& operator=(const ConversationFiles&) = delete;

    const SandboxSpec& spec() const;
    ResultProvenance provenance() const;
    // False when every call gets a fresh sandbox (isolation scope `call`): nothing would persist
    // between an upload and the call that reads it, so hosts should not offer the tools.
    bool keeps_files() const;

    // Writes `content` verbatim as `path` (the artifact-name rules: relative, no `..`), creating
    // parents, replacing a file of that name. Never throws except cancellation.
    Task<FileToolResult> upload(CallerContext caller, std::string path, std::string content);
    // Reads the regular file `path`. Never throws except cancellation.
    Task<FileToolResult> download(CallerContext caller, std::string path);

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace maf_sandbox::kinds
