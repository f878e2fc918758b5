// cgroup v2: one directory holds the limits (memory.max with memory.swap.max 0, pids.max,
// cpu.max) and is delegated whole to the sandbox; cgroup.kill ends every process beneath it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/kernel/cgroup_hugetlb.hpp"
#include "maf_sandbox/runtime/kernel/kernel_files.hpp"

namespace maf_sandbox::runtime::cgroup_detail {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kCpuPeriodUs = 100000;

bool populated(const fs::path& dir) {
    const auto events = read_kernel_file(dir / "cgroup.events");
    return events && events->find("populated 1") != std::string::npos;
}

class CgroupV2 final : public SandboxCgroup {
  public:
    explicit CgroupV2(fs::path dir) : dir_(std::move(dir)) {}

    CgroupLayout layout() const override { return CgroupLayout::v2; }
    std::vector<fs::path> paths() const override { return {dir_}; }
    std::vector<fs::path> join_files() const override { return {dir_ / "cgroup.procs"}; }
    std::vector<fs::path> delegated_dirs() const override { return {dir_}; }

    fs::path oom_kill_count_file() const override { return dir_ / "memory.events"; }

    void kill_all() override {
        std::error_code ec;
        if (!fs::exists(dir_, ec)) {
            return;
        }
        kill_until_empty([this] { return populated(dir_); },
                         [this] { write_file(dir_ / "cgroup.kill", "1"); }, "cgroup.kill");
    }

    void destroy() override { destroy_trees(*this, {dir_}); }

    void freeze(bool frozen) override {
        using namespace std::chrono_literals;
        write_file(dir_ / "cgroup.freeze", frozen ? "1" : "0");
        const std::string want = frozen ? "frozen 1" : "frozen 0";
        for (int round = 0; round < 500; ++round) {
            const auto events = read_kernel_file(dir_ / "cgroup.events").value_or("");
            if (events.find(want) != std::string::npos) {
                return;
            }
            std::this_thread::sleep_for(round < 20 ? 1ms : 10ms);
        }
        throw SystemError(
            EBUSY,
            fmt::format("the sandbox did not become {} within 5 s", frozen ? "frozen" : "thawed"),
            "check for processes stuck in uninterruptible sleep (state D)");
    }

  private:
    fs::path dir_;
};

}  // namespace

std::unique_ptr<SandboxCgroup> create_v2(std::string_view name, const CgroupLimits& limits,
                                         uid_t uid, gid_t gid) {
    const fs::path parent = fs::path(kCgroupRoot) / fs::path(own_cgroup("")).relative_path();
    const auto available = read_kernel_file(parent / "cgroup.controllers").value_or("");
    std::string enable;
    // Huge pages are refused by the guest's filter everywhere; where this cgroup offers the
    // hugetlb controller every size's limit is 0 too.
    const auto huge_page_sizes = host_hugetlb_sizes();
    bool hugetlb = false;
    for (const auto& [controller, wanted] :
         {std::pair<std::string, bool>{"memory", limits.memory_bytes > 0},
          {"pids", true},
          {"cpu", limits.cpus > 0},
          {"hugetlb", false}}) {
        if (available.find(controller) == std::string::npos) {
            if (wanted) {
                throw SandboxCapabilityNotSupported(
                    fmt::format("the cgroup v2 controller '{}' is not available in {}, so the "
                                "sandbox's {} limit "
                                "cannot be enforced; delegate the controller or drop the limit",
                                controller, parent.string(), controller));
            }
            continue;
        }
        if (controller == "hugetlb") {
            if (huge_page_sizes.empty()) {
                continue;
            }
            hugetlb = true;
        }
        enable += fmt::format("+{} ", controller);
    }
    if (!enable.empty()) {
        try {
            write_file(parent / "cgroup.subtree_control", enable);
        } catch (const SystemError& e) {
            throw SandboxCapabilityNotSupported(fmt::format(
                "cannot enable the controllers ({}) for children of {}: {}; run the runtime from a "
                "cgroup without processes of its own (cgroup v2's no-internal-process rule)",
                enable, parent.string(), e.what()));
        }
    }
    const fs::path dir = parent / fmt::format("maf-sbx-{}", name);
    if (::mkdir(dir.c_str(), 0755) != 0) {
        throw SystemError(errno, fmt::format("creating cgroup {}", dir.string()),
                          "run as root, or delegate a cgroup subtree to this user");
    }
    try {
        if (limits.memory_bytes > 0) {
            write_file(dir / "memory.max", std::to_string(limits.memory_bytes));
            if (fs::exists(dir / "memory.swap.max")) {
                write_file(dir / "memory.swap.max", "0");
            }
        }
        if (limits.pids > 0) {
            write_file(dir / "pids.max", std::to_string(limits.pids));
        }
        if (hugetlb) {
            UniqueFd opened(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
            if (!opened) {
                throw SystemError(errno, fmt::format("opening cgroup {}", dir.string()));
            }
            deny_hugetlb(opened.get(), CgroupLayout::v2, huge_page_sizes);
        }
        if (limits.cpus > 0) {
            const auto quota = static_cast<std::uint64_t>(std::llround(limits.cpus * kCpuPeriodUs));
            write_file(dir / "cpu.max",
                       fmt::format("{} {}", std::max<std::uint64_t>(quota, 1000), kCpuPeriodUs));
        }
        for (const char* file : {"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"}) {
            const fs::path path = *file ? dir / file : dir;
            if (::chown(path.c_str(), uid, gid) != 0) {
                throw SystemError(errno,
                                  fmt::format("delegating {} to the sandbox", path.string()));
            }
        }
    } catch (...) {
        ::rmdir(dir.c_str());
        throw;
    }
    return std::make_unique<CgroupV2>(dir);
}

std::unique_ptr<SandboxCgroup> attach_v2(std::vector<fs::path> paths) {
    if (paths.size() != 1) {
        throw InvalidArgument("a cgroup v2 sandbox records exactly one cgroup directory");
    }
    return std::make_unique<CgroupV2>(std::move(paths.front()));
}

}  // namespace maf_sandbox::runtime::cgroup_detail
