#include "local_sandbox.hpp"

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/reclaim.hpp"
#include "maf_sandbox/local/exec_client.hpp"
#include "maf_sandbox/local/exec_outcome.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"
#include "off_loop.hpp"

namespace maf_sandbox::local {

namespace {

SandboxEntry to_entry(const runtime::GuestEntry& entry, const std::string& absolute,
                      const std::string& wd) {
    return SandboxEntry{guest_path_relative_to(absolute, wd).value_or(absolute), entry.kind,
                        entry.size_bytes};
}

}  // namespace

LocalSandbox::LocalSandbox(runtime::SandboxHandle handle, std::string base_directory,
                           TransferLimits files_in, std::uint64_t default_max_output,
                           std::shared_ptr<boost::asio::thread_pool> pool)
    : handle_(std::move(handle)),
      base_(normpath(base_directory)),
      files_in_(files_in),
      default_max_output_(default_max_output),
      pool_(std::move(pool)) {}

runtime::GuestFs LocalSandbox::guest_fs() const {
    return runtime::GuestFs(runtime::open_sandbox_root(handle_),
                            runtime::GuestOwner{handle_.guest_host_uid, handle_.guest_host_gid});
}

NoFollowStat LocalSandbox::no_follow_stat() const {
    return [this](std::string absolute) -> Task<std::optional<SandboxEntry>> {
        auto work = [this, absolute] { return guest_fs().stat(absolute); };
        auto task = off_loop(*pool_, std::move(work));
        auto entry = co_await std::move(task);
        if (!entry) {
            co_return std::nullopt;
        }
        co_return SandboxEntry{absolute, entry->kind, entry->size_bytes};
    };
}

Task<ExecResult> LocalSandbox::exec(ExecRequest request) {
    const auto call = exec_call_for(std::move(request), base_, default_max_output_);
    // (perf, issue 3) On the caller's executor, not the pool: a thread hop there and back cost
    // 0.2-0.3 ms of an exec round trip on a 2-vCPU host.
    auto exchange = exec_in_sandbox_async(handle_, call);
    const auto reply = co_await std::move(exchange);
    co_return exec_result_of(reply, call);
}

Task<ExecResult> LocalSandbox::run_code(std::string, Seconds) {
    throw NotImplemented(
        "the local backend does not run code directly; use exec with an interpreter");
    co_return ExecResult{};
}

Task<void> LocalSandbox::write_file(std::string path, std::string content,
                                    std::string working_directory) {
    const auto wd = resolve_working_directory(working_directory, base_);
    const auto resolved = co_await confine_guest_write_path(no_follow_stat(), path, wd);
    if (content.size() > files_in_.max_bytes_per_file) {
        throw SandboxTransferCapExceeded(
            fmt::format("cannot write '{}': {} bytes is over the backend's {}-byte per-file limit",
                        path, content.size(), files_in_.max_bytes_per_file));
    }
    auto bytes = std::make_shared<std::string>(std::move(content));
    // Moved, not copied, so the last owner of the bytes is the pool-side work: a large buffer is
    // released there, off the caller's path.
    auto work = [this, resolved, bytes = std::move(bytes)] { guest_fs().write(resolved, *bytes); };
    auto task = off_loop(*pool_, std::move(work));
    co_await std::move(task);
}

Task<std::optional<SandboxEntry>> LocalSandbox::stat_file(std::string path,
                                                          std::string working_directory) {
    const auto wd = resolve_working_directory(working_directory, base_);
    const auto resolved = confine_guest_path(path, wd);
    co_await refuse_symlinked_ancestors(no_follow_stat(), resolved, wd);
    auto work = [this, resolved] { return guest_fs().stat(resolved); };
    auto task = off_loop(*pool_, std::move(work));
    const auto entry = co_await std::move(task);
    if (!entry) {
        co_return std::nullopt;
    }
    co_return to_entry(*entry, resolved, wd);
}

Task<std::string> LocalSandbox::read_file(std::string path, std::string working_directory,
                                          std::uint64_t max_bytes) {
    const auto wd = resolve_working_directory(working_directory, base_);
    const auto resolved = confine_guest_path(path, wd);
    co_await refuse_symlinked_ancestors(no_follow_stat(), resolved, wd);
    auto work = [this, resolved, max_bytes] {
        return guest_fs().read(resolved, max_bytes,
                               std::chrono::steady_clock::now() + std::chrono::minutes(5));
    };
    auto task = off_loop(*pool_, std::move(work));
    auto bytes = co_await std::move(task);
    co_return bytes;
}

Task<std::vector<SandboxEntry>> LocalSandbox::list_dir(std::string path,
                                                       std::string working_directory) {
    const auto wd = resolve_working_directory(working_directory, base_);
    const auto resolved = confine_guest_path(path, wd);
    co_await refuse_symlinked_ancestors(no_follow_stat(), resolved, wd, /*include_self=*/true);
    auto work = [this, resolved] { return guest_fs().list(resolved); };
    auto task = off_loop(*pool_, std::move(work));
    const auto children = co_await std::move(task);
    std::vector<SandboxEntry> entries;
    for (const auto& child : children) {
        const auto absolute = join_guest_path(resolved, child.name);
        entries.push_back(to_entry(child, absolute, wd));
    }
    std::sort(entries.begin(), entries.end(),
              [](const auto& a, const auto& b) { return a.path < b.path; });
    co_return entries;
}

Task<void> LocalSandbox::remove(std::string path, std::string working_directory, bool recursive) {
    const auto wd = resolve_working_directory(working_directory, base_);
    const auto resolved = confine_guest_path(path, wd);
    if (resolved == wd) {
        throw ConfinementEscape(fmt::format(
            "refusing to remove '{}': it names the working directory itself; name a path inside it",
            path));
    }
    co_await refuse_symlinked_ancestors(no_follow_stat(), resolved, wd);
    auto work = [this, resolved, recursive] { guest_fs().remove(resolved, recursive); };
    auto task = off_loop(*pool_, std::move(work));
    co_await std::move(task);
}

Task<void> LocalSandbox::reclaim(std::string directory, std::string working_directory,
                                 Seconds timeout) {
    // Through exec as the guest user: never more than the guest program itself could remove.
    const auto reason = co_await reclaim_guest_path(*this, directory, working_directory, timeout);
    if (reason) {
        throw FileError(fmt::format("reclaiming '{}' failed: {}", directory, *reason));
    }
}

}  // namespace maf_sandbox::local
