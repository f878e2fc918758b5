// Lifecycle chaos: a driver acquires, execs, writes and disposes in a loop and is SIGKILLed at
// random points, over and over, against one state directory. Then `maf-sandbox gc` runs (and the
// conversation is purged, as an operator would), and the test counts what is left: processes,
// mounts, cgroups, network and mount namespaces, registry entries and directories. Everything the
// driver created lives beneath a cgroup of this test's own, so nobody else's sandboxes are counted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <random>
#include <set>
#include <thread>

#include "maf_sandbox/runtime/host/gc.hpp"
#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "security_fixture.hpp"

#ifndef MAF_SECURITY_CHAOS_DRIVER
#error "the build passes the driver's path as MAF_SECURITY_CHAOS_DRIVER"
#endif

namespace maf_sandbox::security {
namespace {

using namespace std::chrono_literals;

constexpr int kIterations = 50;

std::vector<pid_t> procs_of(const fs::path& dir) {
    std::vector<pid_t> pids;
    std::ifstream in(dir / "cgroup.procs");
    pid_t pid = 0;
    while (in >> pid) {
        pids.push_back(pid);
    }
    return pids;
}

// Every directory at and below `dir`, children first.
void post_order(const fs::path& dir, std::vector<fs::path>& out) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_directory(ec) && !it->is_symlink(ec)) {
            post_order(it->path(), out);
        }
    }
    out.push_back(dir);
}

// A cgroup of the test's own in every hierarchy the runtime uses, beneath the test's cgroup there.
// Removed at the end with anything still inside (killed first), whatever the test found.
class ChaosCgroup {
  public:
    ChaosCgroup() {
        const auto name = fmt::format("maf-sec-chaos-{}", ::getpid());
        if (runtime::detect_cgroup_layout() == runtime::CgroupLayout::v2) {
            add(fs::path(runtime::kCgroupRoot), runtime::cgroup_detail::own_cgroup(""), name);
        } else {
            for (const char* controller : {"memory", "pids", "cpu", "freezer"}) {
                add(fs::path(runtime::kCgroupRoot) / controller,
                    runtime::cgroup_detail::own_cgroup(controller), name);
            }
        }
    }
    ~ChaosCgroup() {
        for (const auto& dir : dirs_) {
            for (int round = 0; round < 100; ++round) {
                std::vector<fs::path> all;
                post_order(dir, all);
                bool busy = false;
                for (const auto& path : all) {
                    for (const pid_t pid : procs_of(path)) {
                        ::kill(pid, SIGKILL);
                        busy = true;
                    }
                    ::rmdir(path.c_str());
                }
                if (!busy && !fs::exists(dir)) {
                    break;
                }
                std::this_thread::sleep_for(20ms);
            }
        }
    }
    ChaosCgroup(const ChaosCgroup&) = delete;
    ChaosCgroup& operator=(const ChaosCgroup&) = delete;

    // The cgroup.procs files a new process writes "0" into to join.
    std::vector<std::string> join_files() const {
        std::vector<std::string> files;
        for (const auto& dir : dirs_) {
            files.push_back((dir / "cgroup.procs").string());
        }
        return files;
    }
    // Cgroups left beneath ours (sandboxes' and their execs').
    std::vector<fs::path> leftover_cgroups() const {
        std::vector<fs::path> left;
        for (const auto& dir : dirs_) {
            std::vector<fs::path> all;
            post_order(dir, all);
            all.pop_back();  // ours
            left.insert(left.end(), all.begin(), all.end());
        }
        return left;
    }
    // Processes anywhere beneath ours.
    std::set<pid_t> leftover_processes() const {
        std::set<pid_t> pids;
        for (const auto& dir : dirs_) {
            std::vector<fs::path> all;
            post_order(dir, all);
            for (const auto& path : all) {
                for (const pid_t pid : procs_of(path)) {
                    pids.insert(pid);
                }
            }
        }
        return pids;
    }
    const std::string& name() const { return dirs_name_; }

  private:
    void add(const fs::path& root, const std::string& own, const std::string& name) {
        const auto dir = root / fs::path(own).relative_path() / name;
        if (::mkdir(dir.c_str(), 0755) != 0) {
            throw std::runtime_error("cannot create " + dir.string());
        }
        dirs_.push_back(dir);
        dirs_name_ = name;
    }
    std::vector<fs::path> dirs_;
    std::string dirs_name_;
};

// Starts the driver inside the chaos cgroup (joined between fork and exec, before it runs).
pid_t start_driver(const ChaosCgroup& cgroup, const fs::path& state, unsigned seed) {
    const auto files = cgroup.join_files();
    const std::string driver = MAF_SECURITY_CHAOS_DRIVER;
    const std::string state_arg = state.string();
    const std::string seed_arg = std::to_string(seed);
    char* const argv[] = {const_cast<char*>(driver.c_str()), const_cast<char*>(state_arg.c_str()),
                          const_cast<char*>(seed_arg.c_str()), nullptr};
    const pid_t pid = ::fork();
    if (pid == 0) {
        for (const auto& file : files) {
            const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
            if (fd < 0 || ::write(fd, "0", 1) != 1) {
                ::_exit(120);
            }
            ::close(fd);
        }
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        ::dup2(null, 2);
        ::execv(argv[0], argv);
        ::_exit(121);
    }
    return pid;
}

// Whether any descriptor of process `pid` names a file beneath `state`. Every supervisor, from its
// spawn to its sandbox's end, holds the lock of its host id claim, which this test keeps under the
// state directory (MAF_SANDBOX_ID_CLAIMS): its command line names no host path any more.
bool holds_file_under(const fs::path& pid_dir, const std::string& state) {
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator(pid_dir / "fd", ec)) {
        std::error_code link_ec;
        if (fs::read_symlink(fd.path(), link_ec).string().starts_with(state)) {
            return true;
        }
    }
    return false;
}

// Processes on the whole machine holding a file under the state directory (supervisors) or
// whose cgroup is beneath the chaos cgroup (guests and execs).
std::set<pid_t> scan_proc(const fs::path& state, const std::string& cgroup_name) {
    std::set<pid_t> found;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
        const auto name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) {
            continue;
        }
        const auto cgroups = slurp(entry.path() / "cgroup");
        if (cgroups.find(cgroup_name) != std::string::npos ||
            holds_file_under(entry.path(), state.string())) {
            found.insert(std::stoi(name));
        }
    }
    found.erase(::getpid());
    return found;
}

std::set<std::string> namespaces_of(const std::set<pid_t>& pids, const char* kind) {
    std::set<std::string> out;
    for (const pid_t pid : pids) {
        std::error_code ec;
        const auto link = fs::read_symlink(fmt::format("/proc/{}/ns/{}", pid, kind), ec);
        if (!ec) {
            out.insert(link.string());
        }
    }
    return out;
}

int mounts_under(const fs::path& state) {
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    int count = 0;
    while (std::getline(in, line)) {
        count += line.find(state.string()) != std::string::npos ? 1 : 0;
    }
    return count;
}

std::string run_cli(const std::string& args, const fs::path& state) {
#ifdef MAF_SANDBOX_CLI
    const auto command =
        fmt::format("MAF_SANDBOX_STATE_DIR={} {} {} 2>&1", state.string(), MAF_SANDBOX_CLI, args);
    std::string out;
    if (FILE* pipe = ::popen(command.c_str(), "r")) {
        char buffer[512];
        while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
            out += buffer;
        }
        ::pclose(pipe);
    }
    return out;
#else
    (void)args;
    (void)state;
    return "the maf-sandbox CLI was not built";
#endif
}

TEST(LifecycleChaos, KillNineAtRandomPointsThenGcLeavesNoKernelObjectBehind) {
    TempDir state("maf-sec-chaos");
    // The drivers, gc and the scan below share a host id table of the test's own.
    const std::string claims = (state.path() / "ids").string();
    ASSERT_EQ(::setenv("MAF_SANDBOX_ID_CLAIMS", claims.c_str(), 1), 0);
    struct UnsetClaims {
        ~UnsetClaims() { ::unsetenv("MAF_SANDBOX_ID_CLAIMS"); }
    } unset_claims;
    ChaosCgroup cgroup;
    std::mt19937 random(static_cast<unsigned>(::getpid()));
    std::uniform_int_distribution<int> delay_ms(10, 700);
    const auto started = std::chrono::steady_clock::now();
    for (int i = 0; i < kIterations; ++i) {
        const pid_t driver = start_driver(cgroup, state.path(), static_cast<unsigned>(i));
        ASSERT_GT(driver, 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(random)));
        ::kill(driver, SIGKILL);
        int status = 0;
        ::waitpid(driver, &status, 0);
        ASSERT_TRUE(WIFSIGNALED(status)) << "the driver stopped by itself: status " << status;
    }
    const Seconds chaos = std::chrono::steady_clock::now() - started;
    runtime::Registry registry(state.path());
    const auto records_before = registry.list().size();

    // What an operator runs after a crash: gc, then purge the conversation's sandboxes.
    const auto gc_output = run_cli("gc", state.path());
    {
        local::LocalBackendConfig config;
        config.state_dir = state.path();
        local::LocalBackend backend(config);
        for (const char* thread : {"t0", "t1", "t2"}) {
            const auto purge = run_blocking(backend.dispose_scope("chaos", thread));
            EXPECT_FALSE(purge.undisposed) << purge.undisposed->detail;
        }
    }
    // No driver is alive any more, so no create is in progress: nothing is young, all is stale.
    runtime::GcOptions options;
    options.creating_grace = 0s;
    const auto final_gc = runtime::reconcile(registry, options);
    const Seconds total = std::chrono::steady_clock::now() - started;

    const auto processes = cgroup.leftover_processes();
    const auto scanned = scan_proc(state.path(), cgroup.name());
    const auto cgroups = cgroup.leftover_cgroups();
    const auto records = registry.list();
    std::vector<std::string> dirs;
    for (const auto& entry : fs::directory_iterator(state.path() / "sandboxes")) {
        dirs.push_back(entry.path().filename().string());
    }
    std::printf(
        "[ chaos ] %d kills in %.1f s (%.1f s with gc); %zu records before gc; gc: %s"
        "[ chaos ] left: %zu processes by cgroup, %zu by /proc scan, %zu cgroups, %zu net and %zu "
        "mount namespaces, %d host mounts, %zu records, %zu directories; final gc failed %d\n",
        kIterations, chaos.count(), total.count(), records_before, gc_output.c_str(),
        processes.size(), scanned.size(), cgroups.size(), namespaces_of(scanned, "net").size(),
        namespaces_of(scanned, "mnt").size(), mounts_under(state.path()), records.size(),
        dirs.size(), final_gc.failed);
    EXPECT_TRUE(processes.empty());
    EXPECT_TRUE(scanned.empty());
    for (const auto& path : cgroups) {
        ADD_FAILURE() << "leaked cgroup " << path;
    }
    EXPECT_TRUE(namespaces_of(scanned, "net").empty());
    EXPECT_EQ(mounts_under(state.path()), 0);
    EXPECT_TRUE(records.empty());
    EXPECT_TRUE(dirs.empty());
    EXPECT_EQ(final_gc.failed, 0) << (final_gc.errors.empty() ? "" : final_gc.errors.front());
    EXPECT_LT(total.count(), 90.0);
}

}  // namespace
}  // namespace maf_sandbox::security
