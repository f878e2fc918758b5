#include "local_sandbox.hpp"

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/off_loop.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/reclaim.hpp"
#include "maf_sandbox/local/exec_client.hpp"
#include "maf_sandbox/local/exec_outcome.hpp"
#include "maf_sandbox/local/terminal_handle.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

namespace maf_sandbox::local {

namespace {

SandboxEntry entry_at(std::string absolute, const runtime::GuestEntry& entry) {
    return SandboxEntry{std::move(absolute), entry.kind, entry.size_bytes};
}

// GuestFs on one root descriptor: openat2 refuses a link or a non-directory among the ancestors
// again at every act, so a path the base's walk passed cannot be redirected between check and
// act.
class LocalFileOps final : public GuestFileOps {
  public:
    LocalFileOps(runtime::GuestFs fs, std::uint64_t max_write_bytes)
        : fs_(std::move(fs)), max_write_bytes_(max_write_bytes) {}

    Task<std::optional<SandboxEntry>> stat(std::string absolute_path) override {
        const auto entry = fs_.stat(absolute_path);
        if (!entry) {
            co_return std::nullopt;
        }
        co_return entry_at(std::move(absolute_path), *entry);
    }

    Task<void> write(std::string absolute_path, std::string content) override {
        if (content.size() > max_write_bytes_) {
            throw SandboxTransferCapExceeded(fmt::format(
                "cannot write '{}': {} bytes is over the backend's {}-byte per-file limit",
                absolute_path, content.size(), max_write_bytes_));
        }
        fs_.write(absolute_path, content);
        co_return;
    }

    Task<std::string> read(std::string absolute_path, std::uint64_t max_bytes) override {
        co_return fs_.read(absolute_path, max_bytes,
                           std::chrono::steady_clock::now() + std::chrono::minutes(5));
    }

    Task<std::vector<SandboxEntry>> list(std::string absolute_path) override {
        std::vector<SandboxEntry> entries;
        for (const auto& child : fs_.list(absolute_path)) {
            entries.push_back(entry_at(join_guest_path(absolute_path, child.name), child));
        }
        co_return entries;
    }

    Task<void> remove(std::string absolute_path, const SandboxEntry&, bool recursive) override {
        fs_.remove(absolute_path, recursive);
        co_return;
    }

  private:
    runtime::GuestFs fs_;
    std::uint64_t max_write_bytes_;
};

}  // namespace

LocalSandbox::LocalSandbox(runtime::SandboxHandle handle, std::string base_directory,
                           TransferLimits files_in, std::uint64_t default_max_output,
                           std::shared_ptr<boost::asio::thread_pool> pool)
    : handle_(std::move(handle)),
      base_(normpath(base_directory)),
      files_in_(files_in),
      default_max_output_(default_max_output),
      pool_(std::move(pool)) {}

Task<void> LocalSandbox::with_file_ops(FileWork work) {
    // The whole operation, prologue included, is one pool job on one root descriptor: the walk's
    // stats are plain system calls there, not a thread hop and a root re-open each.
    auto job = [this, work = std::move(work)]() -> Task<void> {
        LocalFileOps ops(
            runtime::GuestFs(runtime::open_sandbox_root(handle_),
                             runtime::GuestOwner{handle_.guest_host_uid, handle_.guest_host_gid}),
            files_in_.max_bytes_per_file);
        auto task = work(ops);
        co_await std::move(task);
    };
    auto task = off_loop_task(*pool_, std::move(job));
    co_await std::move(task);
}

Task<ExecResult> LocalSandbox::exec(ExecRequest request) {
    return exec_stream(std::move(request), {});
}

Task<ExecResult> LocalSandbox::exec_stream(ExecRequest request, ExecSink sink) {
    const auto call = exec_call_for(std::move(request), base_, default_max_output_);
    // (perf) On the caller's executor, not the pool: a thread hop there and back is a visible
    // part of an exec round trip on a small host.
    auto exchange = exec_in_sandbox_async(handle_, call, sink);
    const auto reply = co_await std::move(exchange);
    co_return exec_result_of(reply, call);
}

Task<ExecResult> LocalSandbox::run_code(std::string, Seconds) {
    throw NotImplemented(
        "the local backend does not run code directly; use exec with an interpreter");
    co_return ExecResult{};
}

Task<void> LocalSandbox::reclaim(std::string directory, std::string working_directory,
                                 Seconds timeout) {
    // Through exec as the guest user: never more than the guest program itself could remove.
    const auto reason = co_await reclaim_guest_path(*this, directory, working_directory, timeout);
    if (reason) {
        throw FileError(fmt::format("reclaiming '{}' failed: {}", directory, *reason));
    }
}

const runtime::SandboxHandle* terminal_handle_of(const Sandbox& sandbox) noexcept {
    const auto* local = dynamic_cast<const LocalSandbox*>(&sandbox);
    return local != nullptr ? &local->handle() : nullptr;
}

}  // namespace maf_sandbox::local
