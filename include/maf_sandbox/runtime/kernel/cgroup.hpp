// Resource limits and whole-tree kill through cgroups, behind one interface with a v1 and a v2
// implementation. The layout is detected with statfs("/sys/fs/cgroup"): a tmpfs there means v1 or
// hybrid (this machine: memory, pids, cpu and freezer are v1), cgroup2 means pure v2.
//
// A sandbox's cgroups are created beneath the creating process's own cgroup in each hierarchy
// (read from /proc/self/cgroup), so accounting stays hierarchical. The sandbox's cgroup in the
// hierarchies that track processes (v1: pids and freezer; v2: the one directory) is delegated to
// the sandbox's root user, so the supervisor can put each exec in a child cgroup and kill that
// exec's whole tree without touching the host.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

enum class CgroupLayout { v1, v2 };

// Where the cgroup filesystems live; tests never change it, other hosts might.
inline constexpr const char* kCgroupRoot = "/sys/fs/cgroup";
// (perf) How a new process joins a v1 cgroup: "0" written to `tasks` moves the writing thread
// alone, which the kernel does under cgroup_mutex only; the same write to cgroup.procs moves a
// whole thread group and takes the global cgroup_threadgroup_rwsem for writing, whose first
// writer after a quiet spell waits out an RCU grace period (one or more per sandbox launch). For a
// single-threaded process, which every joiner here is (a child fresh from fork), both leave the
// same process in the same cgroup.
inline constexpr const char* kV1SelfJoinFile = "tasks";

// Throws SystemError when /sys/fs/cgroup is neither a tmpfs of v1 hierarchies nor cgroup2.
CgroupLayout detect_cgroup_layout();

struct CgroupLimits {
    std::uint64_t memory_bytes = 0;  // 0 = unlimited; swap is limited to the same total
    std::uint64_t pids = 0;          // 0 = unlimited
    double cpus = 0.0;               // 0 = unlimited; 1.5 = one and a half CPUs of quota
};

// The cgroups of one sandbox, on the host side. Not RAII by itself: a sandbox outlives the
// process that created it, so destroy() is explicit (SandboxProcess and gc call it).
class SandboxCgroup {
  public:
    virtual ~SandboxCgroup() = default;

    // Creates `name` beneath this process's cgroup in every needed hierarchy, writes the limits
    // and delegates the process-tracking directories to `delegate_uid`/`delegate_gid`. Throws
    // SandboxCapabilityNotSupported naming the limit when one cannot be enforced here (a
    // controller missing, memory+swap accounting off while swap is on), SystemError otherwise.
    // Nothing is left behind on failure.
    static std::unique_ptr<SandboxCgroup> create(std::string_view name, const CgroupLimits& limits,
                                                 uid_t delegate_uid, gid_t delegate_gid);

    // Re-attaches to directories recorded earlier (another process, gc).
    static std::unique_ptr<SandboxCgroup> attach(CgroupLayout layout,
                                                 std::vector<std::filesystem::path> paths);

    virtual CgroupLayout layout() const = 0;
    // Every directory this sandbox owns, for the record (removed by destroy or gc).
    virtual std::vector<std::filesystem::path> paths() const = 0;
    // The files a new single-threaded process writes "0" into to join the sandbox (v1: tasks, see
    // kV1SelfJoinFile; v2: cgroup.procs).
    virtual std::vector<std::filesystem::path> join_files() const = 0;
    // The directories the supervisor creates per-exec children in.
    virtual std::vector<std::filesystem::path> delegated_dirs() const = 0;

    // The file in which the kernel counts the OOM killer's kills inside the sandbox, as a line
    // "oom_kill N" (v1 memory.oom_control, v2 memory.events); empty without a memory controller.
    virtual std::filesystem::path oom_kill_count_file() const = 0;

    // Kills every process in the sandbox's cgroups and their descendants, and waits until they
    // are empty. Throws SystemError when processes survive a few seconds of SIGKILL.
    virtual void kill_all() = 0;
    // kill_all, then removes every directory (children first). Missing is success.
    virtual void destroy() = 0;
    // Freezes (true) or thaws (false) every process of the sandbox, its PID 1 included, and waits
    // until the kernel reports the state reached (v1 freezer.state, v2 cgroup.freeze). kill_all
    // and destroy work on a frozen sandbox. Throws SandboxCapabilityNotSupported when there is no
    // freezer here, SystemError when the kernel refuses or does not settle within a few seconds.
    virtual void freeze(bool frozen);
};

// Inside the supervisor: the delegated directories opened as fds before the sandbox's root is
// entered, and the per-exec child cgroups made in them; and the sandbox's OOM kill count, opened
// then too (the sandbox never sees its own memory cgroup).
class ExecCgroupParent {
  public:
    ExecCgroupParent() = default;
    ExecCgroupParent(CgroupLayout layout, std::vector<UniqueFd> dirs, UniqueFd oom_kill_count = {})
        : layout_(layout), dirs_(std::move(dirs)), oom_kill_count_(std::move(oom_kill_count)) {}

    // Opens the directories (O_PATH is not enough for mkdirat: plain O_DIRECTORY) and, when not
    // empty, `oom_kill_count_file` (SandboxCgroup::oom_kill_count_file).
    static ExecCgroupParent open(CgroupLayout layout,
                                 const std::vector<std::filesystem::path>& dirs,
                                 const std::filesystem::path& oom_kill_count_file = {});

    bool empty() const noexcept { return dirs_.empty(); }

    // How many times the OOM killer fired in the sandbox so far (0 when not reported). One pread:
    // a handler reads it around each exec.
    std::uint64_t oom_kills() const noexcept;

    // One exec's child cgroup in every delegated hierarchy.
    class Child {
      public:
        Child() = default;
        Child(CgroupLayout layout, std::vector<UniqueFd> dirs, std::vector<UniqueFd> procs,
              std::string name, std::vector<int> parent_dirs)
            : layout_(layout),
              dirs_(std::move(dirs)),
              procs_(std::move(procs)),
              name_(std::move(name)),
              parent_dirs_(std::move(parent_dirs)) {}

        // Async-signal-safe: writes "0" to each join file (for a freshly forked, single-threaded
        // child: v1 tasks, v2 cgroup.procs).
        bool join_self() const noexcept;
        // Kills every process in the child cgroup (freeze, SIGKILL each, thaw, repeat) until it is
        // empty or `max_rounds` rounds passed. Returns true when empty.
        bool kill_all(int max_rounds = 200) const;
        // True when no process is left in it.
        bool empty() const;
        // rmdir in every hierarchy; false when still populated.
        bool remove() const;
        const std::string& name() const noexcept { return name_; }

      private:
        CgroupLayout layout_ = CgroupLayout::v1;
        std::vector<UniqueFd> dirs_;
        std::vector<UniqueFd> procs_;
        std::string name_;
        std::vector<int> parent_dirs_;  // borrowed from the ExecCgroupParent, for rmdir
    };

    // Creates `name` in every delegated directory. Throws SystemError.
    Child make_child(const std::string& name) const;
    // Removes empty children left by earlier execs whose background processes have since ended,
    // except those of the handlers in `live_handlers` (a child is named exec-<handler pid>-...):
    // a handler whose prepared guest died makes a fresh child on demand, empty until its guest
    // joins it, and must not lose it to a sweep in between.
    void remove_empty_children(const std::set<pid_t>& live_handlers) const;

    const std::vector<UniqueFd>& dirs() const noexcept { return dirs_; }
    CgroupLayout layout() const noexcept { return layout_; }

  private:
    CgroupLayout layout_ = CgroupLayout::v1;
    std::vector<UniqueFd> dirs_;
    UniqueFd oom_kill_count_;
};

namespace cgroup_detail {
// Shared by both layouts: the pids listed in a cgroup.procs file (in the reader's namespace).
std::vector<pid_t> read_procs(int dir_fd);
std::vector<pid_t> read_procs(const std::filesystem::path& dir);
// Writes a whole string to a file under `dir`. Throws SystemError naming the file.
void write_file(const std::filesystem::path& file, std::string_view value);

// The N of the line "oom_kill N" in the text of an oom_kill_count_file(); 0 without that line.
std::uint64_t parse_oom_kill_count(std::string_view text) noexcept;
// This process's cgroup path in the v1 hierarchy holding `controller` ("" for the v2 line).
std::string own_cgroup(std::string_view controller);
// rmdir with retries: the kernel releases a cgroup a few milliseconds after its last process.
bool remove_dir_retrying(const std::filesystem::path& dir);
// Every cgroup directory at and below `dir`, children before parents (links skipped).
void post_order(const std::filesystem::path& dir, std::vector<std::filesystem::path>& out);
// Repeats `kill_round` with a short backoff until `populated` turns false; throws SystemError
// (EBUSY, naming `how`) when processes survive about 5 s of it.
void kill_until_empty(const std::function<bool()>& populated,
                      const std::function<void()>& kill_round, std::string_view how);
// One teardown for both layouts: nothing to do when none of `tops` exists; otherwise
// cgroup.kill_all(), then every directory beneath each top, children first, each rmdir retried
// while the kernel releases it. Throws SystemError naming a directory that stays.
void destroy_trees(SandboxCgroup& cgroup, const std::vector<std::filesystem::path>& tops);
std::unique_ptr<SandboxCgroup> create_v1(std::string_view name, const CgroupLimits& limits,
                                         uid_t uid, gid_t gid);
std::unique_ptr<SandboxCgroup> attach_v1(std::vector<std::filesystem::path> paths);
std::unique_ptr<SandboxCgroup> create_v2(std::string_view name, const CgroupLimits& limits,
                                         uid_t uid, gid_t gid);
std::unique_ptr<SandboxCgroup> attach_v2(std::vector<std::filesystem::path> paths);
}  // namespace cgroup_detail

std::string_view to_string(CgroupLayout layout);
CgroupLayout parse_cgroup_layout(std::string_view text);

}  // namespace maf_sandbox::runtime
