// What both cgroup layouts share: detection, small file I/O, and the supervisor's per-exec child
// cgroups (which only use cgroup.procs, freezer.state and cgroup.kill).
#include "maf_sandbox/runtime/kernel/cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/kernel_files.hpp"
#include "maf_sandbox/runtime/kernel/rootless.hpp"
#include "maf_sandbox/runtime/kernel/sandbox_cgroup_names.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

std::string_view to_string(CgroupLayout layout) {
    return layout == CgroupLayout::v1 ? "v1" : "v2";
}

CgroupLayout parse_cgroup_layout(std::string_view text) {
    if (text == "v1") {
        return CgroupLayout::v1;
    }
    if (text == "v2") {
        return CgroupLayout::v2;
    }
    throw InvalidArgument(fmt::format("unknown cgroup layout '{}': expected v1 or v2", text));
}

CgroupLayout detect_cgroup_layout() {
    struct statfs info {};
    if (::statfs(kCgroupRoot, &info) != 0) {
        throw SystemError(errno, fmt::format("inspecting {}", kCgroupRoot),
                          "mount the cgroup filesystems (v1 hierarchies or cgroup2)");
    }
    if (static_cast<unsigned long>(info.f_type) == CGROUP2_SUPER_MAGIC) {
        return CgroupLayout::v2;
    }
    if (static_cast<unsigned long>(info.f_type) == TMPFS_MAGIC) {
        return CgroupLayout::v1;
    }
    throw SystemError(ENOTSUP,
                      fmt::format("{} is neither cgroup v1 (tmpfs) nor cgroup2", kCgroupRoot),
                      "mount the cgroup filesystems in the usual place");
}

bool is_sandbox_cgroup(const fs::path& path, std::string_view id) {
    if (id.empty() || id.find('/') != std::string_view::npos || !path.is_absolute() ||
        path.lexically_normal() != path) {
        return false;
    }
    const auto inside = path.lexically_relative(kCgroupRoot);
    return !inside.empty() && *inside.begin() != ".." &&
           path.filename() == fmt::format("maf-sbx-{}", id);
}

bool process_in_sandbox_cgroup(pid_t pid, std::string_view id) {
    if (pid <= 0 || id.empty()) {
        return false;
    }
    if (running_rootless()) {
        return own_pid_namespace_init(pid);  // no cgroup of its own (rootless.hpp)
    }
    std::ifstream in(fmt::format("/proc/{}/cgroup", pid));
    const std::string own = fmt::format("maf-sbx-{}", id);
    std::string line;
    while (std::getline(in, line)) {
        // hierarchy-id:controllers:path
        const auto second = line.find(':', line.find(':') + 1);
        if (second == std::string::npos) {
            continue;
        }
        for (const auto& part : fs::path(line.substr(second + 1))) {
            if (part == own) {
                return true;
            }
        }
    }
    return false;
}

std::unique_ptr<SandboxCgroup> SandboxCgroup::create(std::string_view name,
                                                     const CgroupLimits& limits, uid_t delegate_uid,
                                                     gid_t delegate_gid) {
    return detect_cgroup_layout() == CgroupLayout::v1
               ? cgroup_detail::create_v1(name, limits, delegate_uid, delegate_gid)
               : cgroup_detail::create_v2(name, limits, delegate_uid, delegate_gid);
}

void SandboxCgroup::freeze(bool) {
    throw SandboxCapabilityNotSupported(
        "this cgroup driver cannot freeze a sandbox; stop it by deleting it instead");
}

std::unique_ptr<SandboxCgroup> SandboxCgroup::attach(CgroupLayout layout,
                                                     std::vector<fs::path> paths) {
    return layout == CgroupLayout::v1 ? cgroup_detail::attach_v1(std::move(paths))
                                      : cgroup_detail::attach_v2(std::move(paths));
}

namespace cgroup_detail {

namespace {

std::vector<pid_t> parse_pids(std::string_view text) {
    std::vector<pid_t> pids;
    while (!text.empty()) {
        const auto end = text.find('\n');
        const auto line = text.substr(0, end);
        pid_t pid = 0;
        if (std::from_chars(line.data(), line.data() + line.size(), pid).ec == std::errc{} &&
            pid > 0) {
            pids.push_back(pid);
        }
        if (end == std::string_view::npos) {
            break;
        }
        text.remove_prefix(end + 1);
    }
    return pids;
}

}  // namespace

std::vector<pid_t> read_procs(int dir_fd) {
    UniqueFd fd(::openat(dir_fd, "cgroup.procs", O_RDONLY | O_CLOEXEC));
    if (!fd) {
        return {};
    }
    return parse_pids(read_kernel_fd(fd.get()).value_or(""));
}

std::vector<pid_t> read_procs(const fs::path& dir) {
    UniqueFd fd(::open((dir / "cgroup.procs").c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        return {};
    }
    return parse_pids(read_kernel_fd(fd.get()).value_or(""));
}

void write_file(const fs::path& file, std::string_view value) {
    UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
    ssize_t written = -1;
    if (fd) {
        // A limit write may reclaim memory, which gives up with EINTR when a signal arrives
        // (a child's SIGCHLD, a debugger): the write is simply repeated.
        do {
            written = ::write(fd.get(), value.data(), value.size());
        } while (written < 0 && errno == EINTR);
    }
    if (!fd || written != static_cast<ssize_t>(value.size())) {
        throw SystemError(errno, fmt::format("writing '{}' to {}", value, file.string()),
                          "run as root, or delegate a cgroup subtree to this user");
    }
}

std::uint64_t parse_oom_kill_count(std::string_view text) noexcept {
    static constexpr std::string_view kKey = "oom_kill ";
    for (std::size_t at = text.find(kKey); at != std::string_view::npos;
         at = text.find(kKey, at + 1)) {
        if (at == 0 || text[at - 1] == '\n') {  // a line of its own, not a longer name's end
            std::uint64_t count = 0;
            std::from_chars(text.data() + at + kKey.size(), text.data() + text.size(), count);
            return count;
        }
    }
    return 0;
}

std::string own_cgroup(std::string_view controller) {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
        // hierarchy-id:controller-list:path
        const auto first = line.find(':');
        const auto second = line.find(':', first + 1);
        if (first == std::string::npos || second == std::string::npos) {
            continue;
        }
        const std::string_view controllers(line.data() + first + 1, second - first - 1);
        const std::string path = line.substr(second + 1);
        if (controller.empty()) {
            if (controllers.empty() && line.compare(0, first, "0") == 0) {
                return path;
            }
            continue;
        }
        std::string_view rest = controllers;
        while (!rest.empty()) {
            const auto comma = rest.find(',');
            if (rest.substr(0, comma) == controller) {
                return path;
            }
            if (comma == std::string_view::npos) {
                break;
            }
            rest.remove_prefix(comma + 1);
        }
    }
    return "/";
}

bool remove_dir_retrying(const fs::path& dir) {
    using namespace std::chrono_literals;
    // (perf) A backoff from 100 us to 5 ms rather than a flat 5 ms: the kernel usually releases
    // the cgroup within a millisecond, and disposal waits on this. Still about 1 s in all.
    const auto deadline = std::chrono::steady_clock::now() + 1s;
    for (int attempt = 0;; ++attempt) {
        if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) {
            return true;
        }
        if (errno != EBUSY || std::chrono::steady_clock::now() >= deadline) {
            return false;
        }
        std::this_thread::sleep_for(
            std::min<std::chrono::microseconds>(100us * (1 << std::min(attempt, 6)), 5ms));
    }
}

}  // namespace cgroup_detail

// --- The supervisor's per-exec child cgroups --------------------------------------------------

ExecCgroupParent ExecCgroupParent::open(CgroupLayout layout, const std::vector<fs::path>& dirs,
                                        const fs::path& oom_kill_count_file) {
    UniqueFd oom_kill_count;
    if (!oom_kill_count_file.empty()) {
        oom_kill_count = UniqueFd(::open(oom_kill_count_file.c_str(), O_RDONLY | O_CLOEXEC));
        if (!oom_kill_count) {
            throw SystemError(errno, fmt::format("opening the sandbox's OOM kill count {}",
                                                 oom_kill_count_file.string()));
        }
    }
    std::vector<UniqueFd> fds;
    for (const auto& dir : dirs) {
        UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!fd) {
            throw SystemError(errno, fmt::format("opening delegated cgroup {}", dir.string()));
        }
        fds.push_back(std::move(fd));
    }
    return ExecCgroupParent(layout, std::move(fds), std::move(oom_kill_count));
}

std::uint64_t ExecCgroupParent::oom_kills() const noexcept {
    if (!oom_kill_count_) {
        return 0;
    }
    char text[512];
    const ssize_t n = ::pread(oom_kill_count_.get(), text, sizeof text, 0);
    return n > 0 ? cgroup_detail::parse_oom_kill_count(
                       std::string_view(text, static_cast<std::size_t>(n)))
                 : 0;
}

ExecCgroupParent::Child ExecCgroupParent::make_child(const std::string& name) const {
    std::vector<UniqueFd> dirs;
    std::vector<UniqueFd> procs;
    std::vector<int> parents;
    for (const auto& parent : dirs_) {
        if (::mkdirat(parent.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
            throw SystemError(errno, fmt::format("creating the exec cgroup {}", name));
        }
        UniqueFd dir(::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!dir) {
            throw SystemError(errno, fmt::format("opening the exec cgroup {}", name));
        }
        const char* join = layout_ == CgroupLayout::v1 ? kV1SelfJoinFile : "cgroup.procs";
        UniqueFd proc(::openat(dir.get(), join, O_WRONLY | O_CLOEXEC));
        if (!proc) {
            throw SystemError(errno, fmt::format("opening {} of the exec cgroup {}", join, name));
        }
        dirs.push_back(std::move(dir));
        procs.push_back(std::move(proc));
        parents.push_back(parent.get());
    }
    return Child(layout_, std::move(dirs), std::move(procs), name, std::move(parents));
}

namespace {

// The handler pid in an exec child's name (exec-<pid>-<counter>-<stamp>); 0 when it has none.
pid_t handler_of(std::string_view name) {
    name.remove_prefix(std::string_view("exec-").size());
    pid_t pid = 0;
    std::from_chars(name.data(), name.data() + name.size(), pid);
    return pid;
}

}  // namespace

void ExecCgroupParent::remove_empty_children(const std::set<pid_t>& live_handlers) const {
    for (const auto& parent : dirs_) {
        UniqueFd copy(::openat(parent.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        DIR* listing = copy ? ::fdopendir(copy.release()) : nullptr;
        if (listing == nullptr) {
            continue;
        }
        while (const dirent* entry = ::readdir(listing)) {
            const std::string_view name = entry->d_name;
            if (entry->d_type == DT_DIR && name.starts_with("exec-") &&
                live_handlers.count(handler_of(name)) == 0) {
                ::unlinkat(parent.get(), entry->d_name, AT_REMOVEDIR);  // EBUSY: still in use
            }
        }
        ::closedir(listing);
    }
}

bool ExecCgroupParent::Child::join_self() const noexcept {
    // Only ever called by a freshly forked, single-threaded child (see kV1SelfJoinFile).
    bool ok = true;
    for (const auto& proc : procs_) {
        ok = ::write(proc.get(), "0", 1) == 1 && ok;
    }
    return ok;
}

bool ExecCgroupParent::Child::empty() const {
    for (const auto& dir : dirs_) {
        if (!cgroup_detail::read_procs(dir.get()).empty()) {
            return false;
        }
    }
    return true;
}

namespace {

void write_at(int dir, const char* file, std::string_view value) {
    UniqueFd fd(::openat(dir, file, O_WRONLY | O_CLOEXEC));
    if (fd) {
        [[maybe_unused]] auto n = ::write(fd.get(), value.data(), value.size());
    }
}

bool has_file(int dir, const char* file) {
    return ::faccessat(dir, file, F_OK, 0) == 0;
}

}  // namespace

bool ExecCgroupParent::Child::kill_all(int max_rounds) const {
    using namespace std::chrono_literals;
    if (layout_ == CgroupLayout::v2) {
        for (const auto& dir : dirs_) {
            if (has_file(dir.get(), "cgroup.kill")) {
                write_at(dir.get(), "cgroup.kill", "1");
            }
        }
    }
    int freezer = -1;
    for (const auto& dir : dirs_) {
        if (has_file(dir.get(), "freezer.state")) {
            freezer = dir.get();
        }
    }
    for (int round = 0; round < max_rounds; ++round) {
        // Freezing first means nothing in the tree can fork between reading the list and the kill.
        if (freezer >= 0) {
            write_at(freezer, "freezer.state", "FROZEN");
        }
        bool any = false;
        for (const auto& dir : dirs_) {
            for (const pid_t pid : cgroup_detail::read_procs(dir.get())) {
                ::kill(pid, SIGKILL);
                any = true;
            }
        }
        if (freezer >= 0) {
            write_at(freezer, "freezer.state", "THAWED");
        }
        if (!any) {
            return true;
        }
        std::this_thread::sleep_for(round < 10 ? 1ms : 10ms);
    }
    return empty();
}

bool ExecCgroupParent::Child::remove() const {
    bool ok = true;
    for (const int parent : parent_dirs_) {
        if (::unlinkat(parent, name_.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
            ok = false;
        }
    }
    return ok;
}

}  // namespace maf_sandbox::runtime
