// The two protocols every backend implements: a Sandbox (one running guest) and a SandboxBackend
// (hands sandboxes out by key). Every operation is an Asio awaitable; deadlines are enforced by
// the implementation and cancellation must leave nothing behind.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

template <typename T>
using Task = boost::asio::awaitable<T>;

// One running guest. Paths are POSIX-shaped and relative to `working_directory` (absolute paths
// that resolve inside it are accepted); a relative working directory resolves beneath the
// sandbox's base (`base_directory()`), and an empty one names the base itself. A backslash, a path
// outside the working directory, a path through a link, or the working directory itself where a
// file is required throws ConfinementEscape; a non-link, non-directory ancestor throws
// NotADirectory. A method whose capability the backend does not declare throws NotImplemented.
// What acquire says when the key's previous sandbox was discarded by the backend (an exec whose
// outcome was unknown, a supervisor that died) and the one it returns is new: whatever the caller
// left in the old one (files, background processes) is gone. Expiry the spec asked for (an idle
// timeout, a maximum lifetime) is not a replacement and is never reported.
// Where a streamed exec's output goes as it arrives. Awaited on the caller's executor, one chunk
// at a time and never concurrently with itself; the next chunk is read only once it returns, so a
// slow sink slows the program (its pipes fill) instead of making anything buffer without bound.
// Empty: nothing is delivered while the program runs (the result still carries the capture).
using ExecSink = std::function<Task<void>(ExecChunk)>;

struct SandboxReplacement {
    std::string previous_id;
    std::string reason;
};

class Sandbox {
  public:
    virtual ~Sandbox() = default;

    // Set on the sandbox the first acquire after a discard returns (once per discard; later
    // acquires of the same sandbox carry nothing). Front ends must show it: the CLI prints it on
    // stderr, MCP puts it in the tool result.
    const std::optional<SandboxReplacement>& replaced() const { return replaced_; }
    void mark_replaced(SandboxReplacement replacement) { replaced_ = std::move(replacement); }

    // The guest-native storage base that relative working directories resolve beneath.
    virtual std::string base_directory() const = 0;

    // Runs an argv (quoted before any shell) or a shell string. Throws Timeout when exactly
    // `request.timeout` expired (and the whole process tree was killed), and
    // ExecOutputLimitExceeded when a stream went over `max_output_bytes`. Exit codes are faithful;
    // a signal reads as 128 + N.
    virtual Task<ExecResult> exec(ExecRequest request) = 0;

    // exec, with each chunk of stdout and stderr handed to `sink` as the program writes it (in
    // the order the sandbox read them); the result and errors are exec's, and the capture in them
    // is bounded as exec's is. On timeout the error is SandboxExecTimeout, which carries what was
    // printed until then; cancelled, the tree is killed and every chunk read before the
    // cancellation has reached the sink. An exception from the sink ends the exec the same way
    // and propagates. Only a backend declaring `streaming_exec` offers it (it never delivers
    // everything at the end while claiming to stream); the others throw NotImplemented.
    virtual Task<ExecResult> exec_stream(ExecRequest request, ExecSink sink);

    // Runs a program text with the guest's interpreter. Throws SandboxQueuedTimeout when the
    // deadline expired before it started, Timeout when it overran.
    virtual Task<ExecResult> run_code(std::string code, Seconds timeout) = 0;

    // Writes bytes verbatim (never appends, never translates newlines), creating parents.
    virtual Task<void> write_file(std::string path, std::string content,
                                  std::string working_directory) = 0;

    // lstat-like: a final link is described as a link with unknown size; nullopt when absent.
    // Every ancestor from the filesystem root is checked first.
    virtual Task<std::optional<SandboxEntry>> stat_file(std::string path,
                                                        std::string working_directory) = 0;

    // Reads a regular file. A link or non-regular file throws FileError; a directory IsADirectory;
    // a missing file FileNotFound; a file over `max_bytes` SandboxTransferCapExceeded (refused,
    // never truncated).
    virtual Task<std::string> read_file(std::string path, std::string working_directory,
                                        std::uint64_t max_bytes) = 0;

    // Immediate children, sorted by path, links reported as links. The listed directory itself
    // is part of the ancestor walk.
    virtual Task<std::vector<SandboxEntry>> list_dir(std::string path,
                                                     std::string working_directory) = 0;

    // A missing path is success; a link is unlinked, never followed (also inside a recursive
    // removal); a directory needs `recursive` (FileError otherwise).
    virtual Task<void> remove(std::string path, std::string working_directory, bool recursive) = 0;

    // Removes one absolute directory (at least two components, never the working directory, never
    // more than the guest program itself could remove). Missing is success. A backend that
    // withholds the reclaim capability throws NotImplemented before doing anything.
    virtual Task<void> reclaim(std::string directory, std::string working_directory,
                               Seconds timeout) = 0;

  private:
    std::optional<SandboxReplacement> replaced_;
};

// Hands out sandboxes keyed by (key, spec kind), reusing warm ones. Disposal consults the service
// (or the on-disk registry), never only process memory, and never throws.
class SandboxBackend {
  public:
    virtual ~SandboxBackend() = default;

    virtual std::string name() const = 0;
    // The rung this backend really provides on this machine.
    virtual Isolation isolation() const = 0;
    virtual BackendDeclarations declarations() const = 0;

    // Get-or-create; concurrent acquires for one key and kind are serialised. At isolation scope
    // `call` every acquire creates.
    virtual Task<std::shared_ptr<Sandbox>> acquire(SandboxKey key, SandboxSpec spec) = 0;

    // Deletes the key's sandbox of `kind`, or of every kind when unset. Best-effort: a failure is
    // returned, never thrown.
    virtual Task<std::optional<DisposalFailure>> dispose(SandboxKey key,
                                                         std::optional<std::string> kind) = 0;

    // Deletes every sandbox of one conversation, found by label from the service.
    virtual Task<ScopePurge> dispose_scope(std::string scope, std::string thread_id) = 0;

    // Releases clients and connections (not sandboxes). Throws CloseError when cleanup is
    // incomplete; afterwards the backend refuses new work.
    virtual Task<void> close() = 0;
};

}  // namespace maf_sandbox
