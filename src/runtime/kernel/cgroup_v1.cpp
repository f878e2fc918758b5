// cgroup v1 (and the v1 half of a hybrid layout): one hierarchy per controller. Limits are
// memory.limit_in_bytes (+ memory.memsw.limit_in_bytes), pids.max and cpu.cfs_quota_us; the
// process-tracking hierarchies pids and freezer are delegated to the sandbox.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/kernel/cgroup_hugetlb.hpp"
#include "maf_sandbox/runtime/kernel/kernel_files.hpp"

namespace maf_sandbox::runtime::cgroup_detail {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kCfsPeriodUs = 100000;

fs::path controller_root(std::string_view controller) {
    return fs::path(kCgroupRoot) / controller;
}

bool controller_mounted(std::string_view controller) {
    std::error_code ec;
    return fs::exists(controller_root(controller) / "cgroup.procs", ec);
}

bool swap_enabled() {
    std::ifstream swaps("/proc/swaps");
    std::string line;
    int lines = 0;
    while (std::getline(swaps, line)) {
        ++lines;
    }
    return lines > 1;  // the first line is the header
}

void chown_delegated(const fs::path& dir, uid_t uid, gid_t gid) {
    for (const fs::path& path : {dir, dir / "cgroup.procs", dir / "tasks"}) {
        if (::chown(path.c_str(), uid, gid) != 0) {
            throw SystemError(errno, fmt::format("delegating {} to the sandbox", path.string()),
                              "run as root so the runtime can hand the sandbox its own cgroup");
        }
    }
}

class CgroupV1 final : public SandboxCgroup {
  public:
    explicit CgroupV1(std::vector<fs::path> paths) : paths_(std::move(paths)) {}

    CgroupLayout layout() const override { return CgroupLayout::v1; }
    std::vector<fs::path> paths() const override { return paths_; }

    std::vector<fs::path> join_files() const override {
        std::vector<fs::path> files;
        for (const auto& path : paths_) {
            files.push_back(path / kV1SelfJoinFile);
        }
        return files;
    }

    std::vector<fs::path> delegated_dirs() const override {
        std::vector<fs::path> dirs;
        for (const char* controller : {"pids", "freezer"}) {
            if (auto path = find(controller)) {
                dirs.push_back(*path);
            }
        }
        return dirs;
    }

    fs::path oom_kill_count_file() const override {
        const auto memory = find("memory");
        return memory ? *memory / "memory.oom_control" : fs::path();
    }

    void kill_all() override {
        const auto freezer = find("freezer");
        kill_until_empty([this] { return any_process(); },
                         [&] {
                             // Frozen first, so nothing in the tree can fork between reading the
                             // list and the kill.
                             if (freezer) {
                                 try_write(*freezer / "freezer.state", "FROZEN");
                             }
                             for (const auto& top : paths_) {
                                 std::vector<fs::path> dirs;
                                 post_order(top, dirs);
                                 for (const auto& dir : dirs) {
                                     for (const pid_t pid : read_procs(dir)) {
                                         ::kill(pid, SIGKILL);
                                     }
                                 }
                             }
                             if (freezer) {
                                 thaw_tree(*freezer);
                             }
                         },
                         "SIGKILL");
    }

    void destroy() override { destroy_trees(*this, paths_); }

    void freeze(bool frozen) override {
        using namespace std::chrono_literals;
        const auto freezer = find("freezer");
        if (!freezer) {
            throw SandboxCapabilityNotSupported(
                "the sandbox has no v1 freezer cgroup, so it cannot be frozen; mount the freezer "
                "controller or delete the sandbox instead");
        }
        const std::string_view target = frozen ? "FROZEN" : "THAWED";
        write_file(*freezer / "freezer.state", target);
        // FREEZING turns into FROZEN once every task has stopped; a task in uninterruptible
        // sleep can delay that, so the write is repeated while waiting.
        for (int round = 0; round < 500; ++round) {
            const auto state = read_kernel_file(*freezer / "freezer.state").value_or("");
            if (state.starts_with(target)) {
                return;
            }
            std::this_thread::sleep_for(round < 20 ? 1ms : 10ms);
            write_file(*freezer / "freezer.state", target);
        }
        throw SystemError(EBUSY, fmt::format("the sandbox did not become {} within 5 s", target),
                          "check for processes stuck in uninterruptible sleep (state D)");
    }

    std::optional<fs::path> find(std::string_view controller) const {
        const auto root = controller_root(controller).string() + "/";
        for (const auto& path : paths_) {
            if (path.string().starts_with(root)) {
                return path;
            }
        }
        return std::nullopt;
    }

  private:
    bool any_process() const {
        for (const auto& top : paths_) {
            std::vector<fs::path> dirs;
            post_order(top, dirs);
            for (const auto& dir : dirs) {
                if (!read_procs(dir).empty()) {
                    return true;
                }
            }
        }
        return false;
    }

    static void try_write(const fs::path& file, std::string_view value) {
        try {
            write_file(file, value);
        } catch (const SystemError&) {
            // A freezer that cannot freeze still lets SIGKILL rounds finish the job.
        }
    }

    // Thaws `top` and every cgroup beneath it, children first. An exec's own freezer child is
    // frozen for its kill by the supervisor; if that process dies between its FROZEN and THAWED
    // writes, the child stays self-frozen whatever its parent's state, and a SIGKILL sent into it
    // never lands. So the sandbox-wide teardown never trusts a child to be thawed.
    static void thaw_tree(const fs::path& top) {
        std::vector<fs::path> dirs;
        post_order(top, dirs);
        for (const auto& dir : dirs) {
            std::error_code ec;
            if (fs::exists(dir / "freezer.state", ec)) {
                try_write(dir / "freezer.state", "THAWED");
            }
        }
    }

    std::vector<fs::path> paths_;
};

}  // namespace

std::unique_ptr<SandboxCgroup> create_v1(std::string_view name, const CgroupLimits& limits,
                                         uid_t uid, gid_t gid) {
    // Which limits need which controller; a limit asked for on a host without its controller is
    // refused instead of silently not enforced.
    struct Need {
        const char* controller;
        bool required;
    };
    const Need needs[] = {{"memory", limits.memory_bytes > 0},
                          {"pids", true},
                          {"cpu", limits.cpus > 0},
                          {"freezer", false},
                          {"hugetlb", false}};
    // Huge pages are refused by the guest's filter everywhere; where the v1 hugetlb hierarchy is
    // mounted the sandbox also gets a cgroup there with every size's limit at 0.
    const auto huge_page_sizes = host_hugetlb_sizes();
    for (const auto& need : needs) {
        if (need.required && !controller_mounted(need.controller)) {
            throw SandboxCapabilityNotSupported(fmt::format(
                "the cgroup v1 controller '{}' is not mounted under {}, so the sandbox's {} limit "
                "cannot be enforced; mount it or drop the limit",
                need.controller, kCgroupRoot, need.controller));
        }
    }
    if (limits.memory_bytes > 0 && swap_enabled() &&
        !fs::exists(controller_root("memory") / "memory.memsw.limit_in_bytes")) {
        throw SandboxCapabilityNotSupported(
            "swap is on but memory+swap accounting (memory.memsw.*) is off, so the sandbox's "
            "memory "
            "limit could be bypassed through swap; boot with swapaccount=1 or turn swap off");
    }

    std::vector<fs::path> made;
    try {
        for (const auto& need : needs) {
            if (!controller_mounted(need.controller)) {
                continue;
            }
            // (perf) memory and cpu only when limited: each hierarchy costs a mkdir, a join of the
            // supervisor and an rmdir per sandbox. pids and freezer track processes (kill_all).
            const std::string_view kind = need.controller;
            if ((!need.required && (kind == "memory" || kind == "cpu")) ||
                (kind == "hugetlb" && huge_page_sizes.empty())) {
                continue;
            }
            const fs::path dir = controller_root(need.controller) /
                                 fs::path(own_cgroup(need.controller)).relative_path() /
                                 fmt::format("maf-sbx-{}", name);
            if (::mkdir(dir.c_str(), 0755) != 0) {
                throw SystemError(errno, fmt::format("creating cgroup {}", dir.string()),
                                  "run as root, or delegate a cgroup subtree to this user");
            }
            made.push_back(dir);
            const std::string_view controller = need.controller;
            if (controller == "memory" && limits.memory_bytes > 0) {
                const auto bytes = std::to_string(limits.memory_bytes);
                write_file(dir / "memory.limit_in_bytes", bytes);
                if (fs::exists(dir / "memory.memsw.limit_in_bytes")) {
                    write_file(dir / "memory.memsw.limit_in_bytes", bytes);
                }
                // v1 leaves socket buffers uncharged unless this limit is set, and a guest's
                // unread loopback connections then push the host past net.ipv4.tcp_mem (the
                // kernel drops every host connection). The kernel charges only sockets made
                // after the limit is written, so it is set here, before any task joins. v1
                // charges UDP buffers to the same counter; v2 charges all socket memory to
                // memory.max already.
                if (fs::exists(dir / "memory.kmem.tcp.limit_in_bytes")) {
                    write_file(dir / "memory.kmem.tcp.limit_in_bytes", bytes);
                }
            } else if (controller == "pids" && limits.pids > 0) {
                write_file(dir / "pids.max", std::to_string(limits.pids));
            } else if (controller == "cpu" && limits.cpus > 0) {
                const auto quota =
                    static_cast<std::uint64_t>(std::llround(limits.cpus * kCfsPeriodUs));
                // (perf) A new cgroup starts at the default period, and each write re-applies
                // the bandwidth across the task-group tree: write the period only if it differs.
                const auto period = read_kernel_file(dir / "cpu.cfs_period_us");
                if (!period || std::strtoull(period->c_str(), nullptr, 10) != kCfsPeriodUs) {
                    write_file(dir / "cpu.cfs_period_us", std::to_string(kCfsPeriodUs));
                }
                write_file(dir / "cpu.cfs_quota_us",
                           std::to_string(std::max<std::uint64_t>(quota, 1000)));
            }
            if (controller == "hugetlb") {
                UniqueFd opened(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
                if (!opened) {
                    throw SystemError(errno, fmt::format("opening cgroup {}", dir.string()));
                }
                deny_hugetlb(opened.get(), CgroupLayout::v1, huge_page_sizes);
            }
            if (controller == "pids" || controller == "freezer") {
                chown_delegated(dir, uid, gid);
            }
        }
    } catch (...) {
        for (auto it = made.rbegin(); it != made.rend(); ++it) {
            ::rmdir(it->c_str());
        }
        throw;
    }
    return std::make_unique<CgroupV1>(std::move(made));
}

std::unique_ptr<SandboxCgroup> attach_v1(std::vector<fs::path> paths) {
    return std::make_unique<CgroupV1>(std::move(paths));
}

}  // namespace maf_sandbox::runtime::cgroup_detail
