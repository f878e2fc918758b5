// SandboxService: exec and the file plane, each on a Running sandbox whose activity stamp it
// refreshes (the idle timer of autoSuspendPolicy counts from the last of them).
#include <fmt/format.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "file_plane.hpp"
#include "maf_sandbox/core/off_loop.hpp"
#include "refusal.hpp"
#include "sandbox_service.hpp"

namespace maf_sandbox::emulator {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr std::uint64_t kExecOutputCeiling = 1048576;
constexpr std::uint64_t kMaxFileRead = 256ull * 1024 * 1024;
constexpr auto kExecServerTimeout = std::chrono::minutes(30);

}  // namespace

Task<ShellResult> SandboxService::exec(const std::string& id, ShellCommand command) {
    const auto doc = require_running(id);
    const auto handle = doc.handle;
    auto self = shared_from_this();
    // Not tied to the request: a client that goes away does not stop the command.
    auto job = [self, handle, text = command.command, cwd = command.working_directory]() {
        return self->engine_->exec(
            handle, text, cwd,
            std::chrono::duration_cast<std::chrono::milliseconds>(kExecServerTimeout),
            kExecOutputCeiling);
    };
    EngineExec result;
    try {
        result = co_await off_loop(pool_, job);
    } catch (const UnusableWorkingDirectory& e) {
        // The caller's mistake, as the service would answer it: never a 5xx, which every client
        // retries (one call became four).
        throw Refusal{400, "InvalidWorkingDirectory", e.what()};
    }
    ShellResult answer;
    answer.stdout_text = std::move(result.stdout_head);
    answer.stderr_text = std::move(result.stderr_head);
    answer.exit_code = result.exit_code;
    if (result.stdout_total > kExecOutputCeiling || result.stderr_total > kExecOutputCeiling) {
        const std::string diagnostic =
            fmt::format("\n[adc] output exceeded {} bytes and was truncated; process terminated",
                        kExecOutputCeiling);
        (result.stdout_total > kExecOutputCeiling ? answer.stdout_text : answer.stderr_text) +=
            diagnostic;
        answer.exit_code = 137;
    }
    co_return answer;
}

FileTarget SandboxService::file_target(const std::string& id) {
    auto doc = require_running(id);
    return FileTarget{doc.id, std::move(doc.handle)};
}

// Runs `fn(FilePlane&)` off the loop with the sandbox's authority.
template <typename F>
auto SandboxService::with_plane(const FileTarget& target, F&& fn) {
    auto self = shared_from_this();
    auto job = [self, handle = target.handle, fn = std::forward<F>(fn)]() {
        const auto authority = self->engine_->open_authority(handle);
        FilePlane plane(authority, self->store_.stage_key());
        return fn(plane);
    };
    return off_loop(pool_, std::move(job));
}

// Each operation names its job before awaiting it: GCC 12 destroys a lambda temporary of a
// co_await expression twice.
Task<std::unique_ptr<FileStream>> SandboxService::read_file(FileTarget target, std::string path) {
    auto classify = [path](FilePlane& p) { return p.classify_read(path); };
    const auto kind = co_await with_plane(target, classify);
    if (kind == ReadKind::fifo) {
        // The service never answers a FIFO read; neither do we (until shutdown).
        asio::steady_timer forever(executor_, std::chrono::hours(24));
        boost::system::error_code ec;
        co_await forever.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        throw Refusal{503, "ServiceUnavailable", "The emulator is shutting down."};
    }
    const auto piece = options_.file_limits.read_chunk_bytes;
    auto hold = co_await file_budget_->take(executor_, piece);
    auto open = [path](FilePlane& p) { return p.open_read(path, kMaxFileRead); };
    auto file = co_await with_plane(target, open);
    co_return std::make_unique<FileStream>(std::move(file), piece, std::move(hold), pool_,
                                           shared_from_this());
}

Task<void> SandboxService::write_file(FileTarget target, std::string path, std::string content,
                                      bool create_dirs, std::optional<mode_t> mode, bool budgeted) {
    // The budget bounds how many bodies are held at once while their writes run. Over HTTP the
    // server's admission took it before reading the body; a caller without HTTP takes it here.
    ByteBudget::Hold hold;
    if (!budgeted) {
        hold = co_await file_budget_->take(executor_, content.size());
    }
    auto write = [path, content = std::move(content), create_dirs, mode](FilePlane& p) {
        p.write(path, content, create_dirs, mode);
        return 0;
    };
    co_await with_plane(target, write);
}

Task<void> SandboxService::remove_path(FileTarget target, std::string path, bool recursive) {
    auto remove = [path, recursive](FilePlane& p) {
        p.remove(path, recursive);
        return 0;
    };
    co_await with_plane(target, remove);
}

Task<json::object> SandboxService::stat_path(FileTarget target, std::string path) {
    auto stat = [path](FilePlane& p) { return p.stat(path); };
    co_return co_await with_plane(target, stat);
}

Task<std::string> SandboxService::list_directory(FileTarget target, std::string path) {
    const auto& limits = options_.file_limits;
    // Held at most: the names, the answer being written, and the answer handed back.
    auto hold = co_await file_budget_->take(executor_, 3 * limits.max_list_bytes);
    auto list = [path, entries = limits.max_list_entries, bytes = limits.max_list_bytes](
                    FilePlane& p) { return p.list(path, entries, bytes); };
    co_return co_await with_plane(target, list);
}

Task<void> SandboxService::make_directory(FileTarget target, std::string path) {
    auto mkdir = [path](FilePlane& p) {
        p.mkdir(path);
        return 0;
    };
    co_await with_plane(target, mkdir);
}

}  // namespace maf_sandbox::emulator
