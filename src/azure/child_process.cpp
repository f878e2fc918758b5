#include "child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>

#include "maf_sandbox/core/errors.hpp"

extern char** environ;

namespace maf_sandbox::azure::detail {
namespace {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;

class Pipe {
  public:
    Pipe() {
        if (::pipe2(fds_, O_CLOEXEC) != 0) {
            throw SystemError(errno, "creating a pipe for a child process");
        }
    }
    ~Pipe() {
        close_read();
        close_write();
    }
    Pipe(const Pipe&) = delete;
    Pipe& operator=(const Pipe&) = delete;
    int read_end() const { return fds_[0]; }
    int write_end() const { return fds_[1]; }
    int release_read() {
        const int fd = fds_[0];
        fds_[0] = -1;
        return fd;
    }
    void close_read() {
        if (fds_[0] >= 0)
            ::close(fds_[0]);
        fds_[0] = -1;
    }
    void close_write() {
        if (fds_[1] >= 0)
            ::close(fds_[1]);
        fds_[1] = -1;
    }

  private:
    int fds_[2] = {-1, -1};
};

// Kills and reaps the child unless it was already reaped.
class Child {
  public:
    explicit Child(pid_t pid) : pid_(pid) {}
    ~Child() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
    }
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;
    // The exit status when the child has ended, nullopt while it runs.
    std::optional<int> poll() {
        int status = 0;
        const pid_t done = ::waitpid(pid_, &status, WNOHANG);
        if (done != pid_) {
            return std::nullopt;
        }
        pid_ = -1;
        if (WIFEXITED(status))
            return WEXITSTATUS(status);
        if (WIFSIGNALED(status))
            return 128 + WTERMSIG(status);
        return -1;
    }
    void kill() {
        if (pid_ > 0)
            ::kill(pid_, SIGKILL);
    }

  private:
    pid_t pid_;
};

asio::awaitable<std::string> read_bounded(asio::posix::stream_descriptor& stream,
                                          std::size_t max_output) {
    std::string collected;
    char buffer[4096];
    for (;;) {
        boost::system::error_code error;
        const auto n = co_await stream.async_read_some(
            asio::buffer(buffer), asio::redirect_error(asio::use_awaitable, error));
        if (collected.size() < max_output) {
            collected.append(buffer, std::min(n, max_output - collected.size()));
        }
        if (error) {
            break;
        }
    }
    co_return collected;
}

}  // namespace

std::string find_on_path(const std::string& name, const std::string& path) {
    if (name.find('/') != std::string::npos) {
        return ::access(name.c_str(), X_OK) == 0 ? name : std::string();
    }
    std::size_t start = 0;
    while (start <= path.size()) {
        const auto end = path.find(':', start);
        const auto dir =
            path.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (!dir.empty()) {
            const auto candidate = dir + "/" + name;
            if (::access(candidate.c_str(), X_OK) == 0) {
                return candidate;
            }
        }
        if (end == std::string::npos)
            break;
        start = end + 1;
    }
    return {};
}

Task<ProgramOutput> run_program(asio::any_io_executor executor, std::string program,
                                std::vector<std::string> arguments, Seconds timeout,
                                std::size_t max_output) {
    Pipe out;
    Pipe err;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out.write_end(), 1);
    posix_spawn_file_actions_adddup2(&actions, err.write_end(), 2);
    std::vector<char*> argv;
    argv.push_back(program.data());
    for (auto& argument : arguments)
        argv.push_back(argument.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int spawned =
        ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) {
        throw SystemError(spawned, fmt::format("starting {}", program),
                          "check that the program exists and is executable");
    }
    Child child(pid);
    out.close_write();
    err.close_write();
    asio::posix::stream_descriptor out_stream(executor, out.release_read());
    asio::posix::stream_descriptor err_stream(executor, err.release_read());
    asio::steady_timer deadline(executor);
    deadline.expires_after(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout));

    auto outcome =
        co_await ((read_bounded(out_stream, max_output) && read_bounded(err_stream, max_output)) ||
                  deadline.async_wait(asio::use_awaitable));
    if (outcome.index() == 1) {
        child.kill();
        throw Timeout(fmt::format("{} did not finish within {:.0f} s and was killed", program,
                                  timeout.count()));
    }
    auto [stdout_text, stderr_text] = std::get<0>(std::move(outcome));
    // Both pipes are closed; the child is exiting. Poll briefly instead of blocking the loop.
    asio::steady_timer pause(executor);
    for (;;) {
        if (const auto status = child.poll()) {
            co_return ProgramOutput{*status, std::move(stdout_text), std::move(stderr_text)};
        }
        if (std::chrono::steady_clock::now() >= deadline.expiry()) {
            child.kill();
            throw Timeout(fmt::format("{} did not exit within {:.0f} s and was killed", program,
                                      timeout.count()));
        }
        pause.expires_after(std::chrono::milliseconds(5));
        co_await pause.async_wait(asio::use_awaitable);
    }
}

}  // namespace maf_sandbox::azure::detail
