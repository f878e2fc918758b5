// The rootless battery's throwaway account (rootless_user.hpp).
#include "rootless_user.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace maf_sandbox::testing {

namespace fs = std::filesystem;

namespace {

constexpr const char* kAccountFiles[] = {"/etc/passwd",  "/etc/shadow", "/etc/group",
                                         "/etc/gshadow", "/etc/subuid", "/etc/subgid"};

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

void write_file(const std::string& path, const std::string& content) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

struct Identity {
    bool drop = false;
    uid_t uid = 0;
    gid_t gid = 0;
};

Outcome run_with(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 const Identity& identity, const fs::path& cwd, std::chrono::seconds limit) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
        throw std::runtime_error("pipe");
    }
    std::vector<char*> args, envp;
    for (const auto& a : argv) {
        args.push_back(const_cast<char*>(a.c_str()));
    }
    args.push_back(nullptr);
    for (const auto& e : env) {
        envp.push_back(const_cast<char*>(e.c_str()));
    }
    envp.push_back(nullptr);
    const pid_t child = ::fork();
    if (child == 0) {
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        const int null = ::open("/dev/null", O_RDONLY);
        ::dup2(null, 0);
        ::setpgid(0, 0);
        if (identity.drop && (::setgroups(0, nullptr) != 0 ||
                              ::setresgid(identity.gid, identity.gid, identity.gid) != 0 ||
                              ::setresuid(identity.uid, identity.uid, identity.uid) != 0)) {
            ::_exit(120);
        }
        if (::chdir(cwd.c_str()) != 0) {
            ::_exit(121);
        }
        ::execve(args[0], args.data(), envp.data());
        ::_exit(122);
    }
    ::close(out[1]);
    ::close(err[1]);
    Outcome outcome;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    bool open_out = true, open_err = true;
    while (open_out || open_err) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              deadline - std::chrono::steady_clock::now())
                              .count();
        if (left <= 0) {
            ::kill(-child, SIGKILL);
            break;
        }
        pollfd fds[2] = {{open_out ? out[0] : -1, POLLIN, 0}, {open_err ? err[0] : -1, POLLIN, 0}};
        if (::poll(fds, 2, static_cast<int>(left)) < 0 && errno != EINTR) {
            break;
        }
        char chunk[4096];
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || fds[i].revents == 0) {
                continue;
            }
            const ssize_t n = ::read(fds[i].fd, chunk, sizeof chunk);
            if (n > 0) {
                (i == 0 ? outcome.out : outcome.err).append(chunk, static_cast<std::size_t>(n));
            } else if (n == 0 || errno != EINTR) {
                (i == 0 ? open_out : open_err) = false;
            }
        }
    }
    ::close(out[0]);
    ::close(err[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return outcome;
}

}  // namespace

RootlessUser::RootlessUser(std::string name, bool subordinate_ids) : name_(std::move(name)) {
    for (const char* file : kAccountFiles) {
        saved_[file] = read_file(file);
    }
    char pattern[] = "/tmp/maf-rootless-home-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) {
        throw std::runtime_error("mkdtemp");
    }
    home_ = pattern;
    // A system account gets no subordinate ids from useradd; an ordinary one gets its range.
    const std::string command = "useradd " + std::string(subordinate_ids ? "" : "--system ") +
                                "-M -s /bin/sh -d " + home_.string() + " " + name_;
    if (std::system(command.c_str()) != 0) {
        throw std::runtime_error("useradd failed: " + command);
    }
    const passwd* entry = ::getpwnam(name_.c_str());
    if (entry == nullptr) {
        throw std::runtime_error("no passwd entry after useradd");
    }
    uid_ = entry->pw_uid;
    gid_ = entry->pw_gid;
    const bool has_range = read_file("/etc/subuid").find(name_ + ":") != std::string::npos;
    if (subordinate_ids && !has_range) {
        throw std::runtime_error("useradd gave no subordinate ids (SUB_UID_COUNT in login.defs)");
    }
    if (::chown(home_.c_str(), uid_, gid_) != 0) {
        throw std::runtime_error("chown home");
    }
}

RootlessUser::~RootlessUser() {
    for (const pid_t pid : live_processes()) {
        ::kill(pid, SIGKILL);  // only this throwaway account's processes
    }
    std::system(("userdel " + name_ + " 2>/dev/null").c_str());
    for (const auto& [file, content] : saved_) {
        write_file(file, content);
    }
    std::error_code ignored;
    fs::remove_all(home_, ignored);
}

Outcome RootlessUser::run(const std::vector<std::string>& argv, std::chrono::seconds limit) const {
    const std::vector<std::string> env{
        "HOME=" + home_.string(), "XDG_STATE_HOME=" + (home_ / "state").string(),
        "PATH=/usr/local/bin:/usr/bin:/bin", "USER=" + name_, "LOGNAME=" + name_};
    return run_with(argv, env, Identity{true, uid_, gid_}, home_, limit);
}

Outcome RootlessUser::run_with_state_home(const std::vector<std::string>& argv,
                                          const fs::path& state_home) const {
    const std::vector<std::string> env{
        "HOME=" + home_.string(), "XDG_STATE_HOME=" + state_home.string(),
        "PATH=/usr/local/bin:/usr/bin:/bin", "USER=" + name_, "LOGNAME=" + name_};
    return run_with(argv, env, Identity{true, uid_, gid_}, home_, std::chrono::seconds(120));
}

std::vector<pid_t> RootlessUser::live_processes() const {
    std::vector<pid_t> pids;
    for (const auto& entry : fs::directory_iterator("/proc")) {
        const auto name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) {
            continue;
        }
        struct stat st {};
        if (::stat(entry.path().c_str(), &st) != 0 || st.st_uid != uid_) {
            continue;
        }
        const auto status = read_file(entry.path() / "status");
        if (status.find("State:\tZ") != std::string::npos) {
            continue;
        }
        pids.push_back(static_cast<pid_t>(std::stoi(name)));
    }
    return pids;
}

Outcome run_as_root(const std::vector<std::string>& argv, std::chrono::seconds limit) {
    std::vector<std::string> env{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"};
    if (const char* state = std::getenv("MAF_SANDBOX_STATE_DIR")) {
        env.push_back(std::string("MAF_SANDBOX_STATE_DIR=") + state);
    }
    return run_with(argv, env, Identity{}, "/", limit);
}

}  // namespace maf_sandbox::testing
