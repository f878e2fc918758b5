// What a forged state record aims at, made and removed by the test itself: a process in a cgroup
// of the test's own, an empty cgroup of the test's own, and a root-owned 0700 directory with a
// file in it. Also the forger: a child that drops to the unprivileged uid `nobody` before it
// writes anything, as another host user would.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

namespace maf_sandbox::security::forgery {

namespace fs = std::filesystem;

inline constexpr uid_t kNobody = 65534;

// Field 22 of /proc/<pid>/stat: what a record pairs with a pid (public to every user).
inline std::uint64_t start_time_of(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream fields(text.substr(text.rfind(')') + 2));
    std::string field;
    for (int index = 3; index <= 22 && fields >> field; ++index) {
        if (index == 22) {
            return std::stoull(field);
        }
    }
    throw std::runtime_error(fmt::format("no start time for pid {}", pid));
}

// The cgroup hierarchy that tracks processes here: v1's pids controller, or the v2 root.
inline fs::path process_hierarchy() {
    if (fs::exists("/sys/fs/cgroup/pids/cgroup.procs")) {
        return "/sys/fs/cgroup/pids";
    }
    return "/sys/fs/cgroup";
}

inline std::string layout_name() {
    return process_hierarchy() == fs::path("/sys/fs/cgroup") ? "v2" : "v1";
}

// Runs `forge` in a child as uid and gid `nobody` (no supplementary groups, umask 0); true when
// it returned true there.
inline bool as_nobody(const std::function<bool()>& forge) {
    const pid_t child = ::fork();
    if (child == 0) {
        ::umask(0);
        if (::setgroups(0, nullptr) != 0 || ::setresgid(kNobody, kNobody, kNobody) != 0 ||
            ::setresuid(kNobody, kNobody, kNobody) != 0) {
            ::_exit(3);
        }
        ::_exit(forge() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

inline bool write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    return static_cast<bool>(out.flush());
}

class Victims {
  public:
    Victims() {
        const auto tag = fmt::format("maf-sec-victim-{}-{}", ::getpid(), ++count());
        busy_cgroup_ = process_hierarchy() / (tag + "-busy");
        empty_cgroup_ = process_hierarchy() / (tag + "-empty");
        char pattern[] = "/tmp/maf-sec-victim-XXXXXX";
        if (::mkdtemp(pattern) == nullptr) {
            throw std::runtime_error("mkdtemp failed");
        }
        top_ = pattern;
        dir_ = top_ / "precious";
        fs::create_directory(dir_);
        write_text(dir_ / "f", "precious\n");
        ::chmod(dir_.c_str(), 0700);
        if (::mkdir(busy_cgroup_.c_str(), 0755) != 0 || ::mkdir(empty_cgroup_.c_str(), 0755) != 0) {
            throw std::runtime_error(fmt::format("creating the victim cgroups: errno {}", errno));
        }
        pid_ = ::fork();
        if (pid_ == 0) {
            ::setsid();
            ::execl("/bin/sleep", "sleep", "600", nullptr);
            ::_exit(127);
        }
        write_text(busy_cgroup_ / "cgroup.procs", std::to_string(pid_));
        start_time_ = start_time_of(pid_);
    }
    Victims(const Victims&) = delete;
    Victims& operator=(const Victims&) = delete;
    ~Victims() {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        // A cgroup whose last process just died stays busy for a moment.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (const auto& cgroup : {busy_cgroup_, empty_cgroup_}) {
            while (::rmdir(cgroup.c_str()) != 0 && errno == EBUSY &&
                   std::chrono::steady_clock::now() < deadline) {
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        }
        std::error_code ignored;
        fs::remove_all(top_, ignored);
    }

    pid_t pid() const { return pid_; }
    std::uint64_t start_time() const { return start_time_; }
    const fs::path& busy_cgroup() const { return busy_cgroup_; }
    const fs::path& empty_cgroup() const { return empty_cgroup_; }
    const fs::path& dir() const { return dir_; }

    // The victim process runs (not reaped, not a zombie) and is still in its cgroup.
    bool process_alive() const {
        std::ifstream in(fmt::format("/proc/{}/stat", pid_));
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const auto close = text.rfind(')');
        return close != std::string::npos && text.size() > close + 2 && text[close + 2] != 'Z';
    }
    bool cgroups_kept() const { return fs::exists(busy_cgroup_) && fs::exists(empty_cgroup_); }
    bool dir_kept() const { return fs::exists(dir_ / "f"); }
    bool all_intact() const { return process_alive() && cgroups_kept() && dir_kept(); }

  private:
    static int& count() {
        static int n = 0;
        return n;
    }

    pid_t pid_ = -1;
    std::uint64_t start_time_ = 0;
    fs::path busy_cgroup_;
    fs::path empty_cgroup_;
    fs::path top_;
    fs::path dir_;
};

// A directory directly in /tmp (where another user can make one), removed as root at the end.
class TmpName {
  public:
    explicit TmpName(const std::string& prefix) {
        path_ = fmt::format("/tmp/{}-{}-{}", prefix, ::getpid(), ++count());
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    TmpName(const TmpName&) = delete;
    TmpName& operator=(const TmpName&) = delete;
    ~TmpName() {
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    const fs::path& path() const { return path_; }

  private:
    static int& count() {
        static int n = 0;
        return n;
    }
    fs::path path_;
};

// Runs a shell command line and returns what it printed (stdout and stderr) and its exit status.
struct CommandResult {
    int status = -1;
    std::string output;
};

inline CommandResult run_command(const std::string& command) {
    CommandResult result;
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    if (pipe == nullptr) {
        return result;
    }
    char buffer[4096];
    while (const std::size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) {
        result.output.append(buffer, got);
    }
    const int status = ::pclose(pipe);
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

}  // namespace maf_sandbox::security::forgery
