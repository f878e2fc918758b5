#include "maf_sandbox/emulator/emulator_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <string_view>

#include "maf_sandbox/core/errors.hpp"

extern char** environ;

namespace maf_sandbox::emulator {

namespace {

constexpr std::string_view kReadyPrefix = "listening on ";

using Clock = std::chrono::steady_clock;

// Reads until the first newline, EOF or the deadline; what was read, without the newline.
std::string read_first_line(int fd, Clock::time_point deadline) {
    std::string text;
    while (text.find('\n') == std::string::npos) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        pollfd p{fd, POLLIN, 0};
        const int ready = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready <= 0) {
            break;
        }
        char buffer[256];
        const auto n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        text.append(buffer, static_cast<std::size_t>(n));
    }
    return text.substr(0, text.find('\n'));
}

}  // namespace

EmulatorProcess::EmulatorProcess(EmulatorLaunch launch)
    : state_dir_(std::move(launch.state_dir)),
      log_(launch.log_file.empty() ? state_dir_ / "emulator.log" : std::move(launch.log_file)) {
    std::filesystem::create_directories(state_dir_);
    std::vector<std::string> args{
        launch.executable.string(), "serve", "--listen", "127.0.0.1:0", "--state-dir",
        state_dir_.string()};
    args.insert(args.end(), launch.args.begin(), launch.args.end());
    std::vector<char*> argv;
    for (auto& arg : args) {
        argv.push_back(arg.data());
    }
    argv.push_back(nullptr);

    // Close-on-exec in this process (no other child inherits the pipe); dup2 clears it on the
    // emulator's stdout.
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) {
        throw SystemError(errno, "creating a pipe for the acas-emulator's stdout");
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int spawned = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    stdout_fd_ = out[0];
    if (spawned != 0) {
        pid_ = -1;
        ::close(stdout_fd_);
        stdout_fd_ = -1;
        throw SystemError(spawned, fmt::format("starting {}", args[0]),
                          "build the acas-emulator target, or pass its path");
    }

    first_line_ = read_first_line(stdout_fd_, Clock::now() + launch.start_timeout);
    if (!first_line_.starts_with(kReadyPrefix)) {
        const bool exited = !alive();
        terminate();
        if (!exited && first_line_.empty()) {
            throw Timeout(fmt::format("acas-emulator said nothing within {} ms; its log is {}",
                                      launch.start_timeout.count(), log_.string()));
        }
        throw Error(fmt::format("acas-emulator did not start (first line '{}'); its log is {}",
                                first_line_, log_.string()));
    }
    base_url_ = first_line_.substr(kReadyPrefix.size());
    const auto colon = base_url_.rfind(':');
    if (colon != std::string::npos) {
        port_ = static_cast<std::uint16_t>(std::stoul(base_url_.substr(colon + 1)));
    }
}

EmulatorProcess::~EmulatorProcess() {
    terminate();
}

int EmulatorProcess::terminate() {
    if (pid_ > 0) {
        ::kill(pid_, SIGTERM);
        while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
    }
    if (stdout_fd_ >= 0) {
        ::close(stdout_fd_);
        stdout_fd_ = -1;
    }
    return status_;
}

// WNOWAIT: an exited child stays a zombie until terminate() reaps it, so its pid cannot be
// reused by another process before the SIGTERM there.
bool EmulatorProcess::alive() const {
    if (pid_ <= 0) {
        return false;
    }
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           info.si_pid == 0;
}

std::optional<std::filesystem::path> emulator_next_to_self() {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) {
        return std::nullopt;
    }
    auto path = self.parent_path() / "acas-emulator";
    if (::access(path.c_str(), X_OK) != 0) {
        return std::nullopt;
    }
    return path;
}

}  // namespace maf_sandbox::emulator
