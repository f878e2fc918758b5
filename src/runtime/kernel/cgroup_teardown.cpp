// The teardown both cgroup layouts share: kill until empty, then remove every directory children
// first, retrying while the kernel lets go of them. Only how a round kills differs by layout
// (v1: freeze, SIGKILL each listed process, thaw; v2: cgroup.kill).
#include <cerrno>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/cgroup.hpp"

namespace maf_sandbox::runtime::cgroup_detail {

namespace fs = std::filesystem;

void post_order(const fs::path& dir, std::vector<fs::path>& out) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_directory(ec) && !it->is_symlink(ec)) {
            post_order(it->path(), out);
        }
    }
    out.push_back(dir);
}

void kill_until_empty(const std::function<bool()>& populated,
                      const std::function<void()>& kill_round, std::string_view how) {
    using namespace std::chrono_literals;
    // (perf) Polled with a backoff from 100 us: killed processes usually leave the cgroup in
    // well under a millisecond, and disposal waits on this.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    for (int round = 0; std::chrono::steady_clock::now() < deadline; ++round) {
        // Looked at before any kill: an empty cgroup (PID 1 already ended its namespace) needs
        // no round, whose v1 freeze and thaw each patch kernel code on every CPU.
        if (!populated()) {
            return;
        }
        kill_round();
        std::this_thread::sleep_for(
            std::min<std::chrono::microseconds>(100us * (1 << std::min(round, 7)), 10ms));
    }
    if (populated()) {
        throw SystemError(
            EBUSY, fmt::format("killing every process of a sandbox: some survived 5 s of {}", how),
            "check for processes stuck in uninterruptible sleep (state D)");
    }
}

void destroy_trees(SandboxCgroup& cgroup, const std::vector<fs::path>& tops) {
    std::error_code ec;
    bool any = false;
    for (const auto& top : tops) {
        any = fs::exists(top, ec) || any;
    }
    if (!any) {
        return;
    }
    cgroup.kill_all();
    for (const auto& top : tops) {
        if (!fs::exists(top, ec)) {
            continue;
        }
        std::vector<fs::path> dirs;
        post_order(top, dirs);
        for (const auto& dir : dirs) {
            if (!remove_dir_retrying(dir)) {
                throw SystemError(
                    errno, fmt::format("removing cgroup {}", dir.string()),
                    "run `maf-sandbox gc` later; the kernel may still be releasing it");
            }
        }
    }
}

}  // namespace maf_sandbox::runtime::cgroup_detail
