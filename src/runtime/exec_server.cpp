// One exec inside the sandbox: fork the program into its own child cgroup, as the guest user,
// without capabilities and under the seccomp filter; stream its output with a fixed buffer; kill
// its whole tree on timeout or when the host hangs up; leave background processes alive after a
// normal finish.
#include "exec_server.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "maf_sandbox/runtime/exec_protocol.hpp"
#include "maf_sandbox/runtime/isolation.hpp"
#include "maf_sandbox/runtime/unique_fd.hpp"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace maf_sandbox::runtime {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kChunk = 64 * 1024;
constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";
// After the program exits, output still in flight is collected for this long at most; a
// background process holding the pipes open must not hold the exec hostage.
constexpr auto kDrainWindow = std::chrono::milliseconds(200);
constexpr auto kDrainQuiet = std::chrono::milliseconds(20);

// Why the child could not reach execve, sent over a close-on-exec pipe.
struct ChildFailure {
    int stage;  // 0 join cgroup, 1 ids, 2 caps, 3 chdir, 4 seccomp, 5 exec
    int error;
};

struct Stream {
    UniqueFd fd;
    char type;
    std::uint64_t total = 0;
    std::uint64_t sent = 0;
};

class Exec {
  public:
    Exec(int connection, const ExecContext& context) : connection_(connection), context_(context) {}

    void run() {
        char type = 0;
        std::string payload;
        if (!exec_wire::read_frame(connection_, type, payload, exec_wire::kMaxRequestBytes) ||
            type != exec_wire::kRequest) {
            return;
        }
        ExecCall call = exec_wire::exec_call_from_json(json::parse(payload));
        if (!exec_wire::read_frame(connection_, type, call.stdin_bytes,
                                   exec_wire::kMaxStdinBytes) ||
            type != exec_wire::kStdin) {
            return;
        }
        ExecReply reply;
        try {
            execute(call, reply);
        } catch (const std::exception& e) {
            reply.status = ExecStatus::failed;
            reply.message = e.what();
        }
        exec_wire::write_frame(connection_, exec_wire::kResult,
                               json::serialize(exec_wire::to_json(reply)));
    }

  private:
    void execute(const ExecCall& call, ExecReply& reply) {
        const auto& config = *context_.config;
        // Everything the child needs is prepared here: between fork and exec only
        // async-signal-safe calls run.
        std::vector<std::string> argv =
            std::holds_alternative<std::string>(call.command)
                ? std::vector<std::string>{"/bin/sh", "-c", std::get<std::string>(call.command)}
                : std::get<std::vector<std::string>>(call.command);
        std::map<std::string, std::string> env(config.base_env.begin(), config.base_env.end());
        for (const auto& [key, value] : call.env) {
            env[key] = value;
        }
        std::vector<std::string> env_lines;
        for (const auto& [key, value] : env) {
            env_lines.push_back(key + "=" + value);
        }
        std::vector<std::string> candidates;
        if (argv[0].find('/') != std::string::npos) {
            candidates.push_back(argv[0]);
        } else {
            const std::string search = env.count("PATH") ? env["PATH"] : std::string(kDefaultPath);
            std::string_view path = search;
            while (true) {
                const auto colon = path.find(':');
                const auto dir = path.substr(0, colon);
                candidates.push_back(fmt::format("{}/{}", dir.empty() ? "." : dir, argv[0]));
                if (colon == std::string_view::npos) {
                    break;
                }
                path.remove_prefix(colon + 1);
            }
        }
        const std::string cwd = call.cwd.empty() ? config.default_cwd : call.cwd;
        std::vector<char*> argv_ptrs;
        for (auto& arg : argv) {
            argv_ptrs.push_back(arg.data());
        }
        argv_ptrs.push_back(nullptr);
        std::vector<char*> env_ptrs;
        for (auto& line : env_lines) {
            env_ptrs.push_back(line.data());
        }
        env_ptrs.push_back(nullptr);

        static std::atomic<unsigned> counter{0};
        std::optional<ExecCgroupParent::Child> cgroup;
        if (!context_.cgroups->empty()) {
            cgroup = context_.cgroups->make_child(fmt::format("exec-{}-{}", ::getpid(), counter++));
        }

        int in[2], out[2], err[2], fail[2];
        if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 ||
            ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(fail, O_CLOEXEC) != 0) {
            throw std::runtime_error(fmt::format("creating pipes: {}", std::strerror(errno)));
        }
        const uid_t uid = config.guest_uid;
        const gid_t gid = config.guest_gid;
        const auto& seccomp = *context_.seccomp;
        const pid_t child = ::fork();
        if (child < 0) {
            throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
        }
        if (child == 0) {
            const auto fail_with = [&](int stage) {
                const ChildFailure failure{stage, errno};
                [[maybe_unused]] auto n = ::write(fail[1], &failure, sizeof failure);
                ::_exit(127);
            };
            sigset_t all;
            sigemptyset(&all);
            ::sigprocmask(SIG_SETMASK, &all, nullptr);
            ::signal(SIGPIPE, SIG_DFL);
            ::setsid();
            if (cgroup && !cgroup->join_self()) {
                fail_with(0);
            }
            ::dup2(in[0], 0);
            ::dup2(out[1], 1);
            ::dup2(err[1], 2);
            ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
            if (!drop_bounding_set()) {
                fail_with(2);
            }
            const gid_t groups[1] = {gid};
            if (::setgroups(1, groups) != 0 || ::setresgid(gid, gid, gid) != 0 ||
                ::setresuid(uid, uid, uid) != 0) {
                fail_with(1);
            }
            if (!drop_all_capabilities()) {
                fail_with(2);
            }
            if (::chdir(cwd.c_str()) != 0) {
                fail_with(3);
            }
            if (!install_seccomp(seccomp)) {
                fail_with(4);
            }
            int exec_error = ENOENT;
            for (const auto& candidate : candidates) {
                ::execve(candidate.c_str(), argv_ptrs.data(), env_ptrs.data());
                if (errno != ENOENT && errno != ENOTDIR) {
                    exec_error = errno;
                    if (errno != EACCES) {
                        break;
                    }
                }
            }
            errno = exec_error;
            fail_with(5);
        }
        ::close(in[0]);
        ::close(out[1]);
        ::close(err[1]);
        ::close(fail[1]);
        UniqueFd stdin_fd(in[1]);
        UniqueFd failure_fd(fail[0]);
        streams_[0] = Stream{UniqueFd(out[0]), exec_wire::kStdout};
        streams_[1] = Stream{UniqueFd(err[0]), exec_wire::kStderr};
        for (auto& stream : streams_) {
            ::fcntl(stream.fd.get(), F_SETFL, O_NONBLOCK);
        }
        ::fcntl(stdin_fd.get(), F_SETFL, O_NONBLOCK);
        UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));

        const auto deadline = Clock::now() + call.timeout;
        std::size_t stdin_offset = 0;
        if (call.stdin_bytes.empty()) {
            stdin_fd.reset();
        }
        bool exited = false;
        int status = 0;
        cap_ = call.max_output_bytes;
        while (!exited) {
            pollfd fds[5];
            int count = 0;
            const int pid_index = count;
            fds[count++] = {pidfd.get(), POLLIN, 0};
            const int conn_index = count;
            fds[count++] = {connection_, POLLIN | POLLRDHUP, 0};
            const int out_index = count;
            fds[count++] = {eof_[0] ? -1 : streams_[0].fd.get(), POLLIN, 0};
            const int err_index = count;
            fds[count++] = {eof_[1] ? -1 : streams_[1].fd.get(), POLLIN, 0};
            const int in_index = stdin_fd ? count : -1;
            if (stdin_fd) {
                fds[count++] = {stdin_fd.get(), POLLOUT, 0};
            }
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                    .count();
            if (left <= 0) {
                kill_tree(cgroup, child);
                ::waitpid(child, nullptr, 0);
                reply.status = ExecStatus::timed_out;
                reply.message =
                    fmt::format("the exec ran past its {} ms timeout; its process tree was killed",
                                call.timeout.count());
                finish(reply);
                return;
            }
            if (::poll(fds, count, static_cast<int>(std::min<long long>(left, 1000))) < 0 &&
                errno != EINTR) {
                throw std::runtime_error(fmt::format("poll: {}", std::strerror(errno)));
            }
            if (fds[conn_index].revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR)) {
                // The host hung up (or timed out itself): nobody waits for this tree any more.
                kill_tree(cgroup, child);
                ::waitpid(child, nullptr, 0);
                std::_Exit(0);
            }
            if (fds[out_index].revents) {
                pump(streams_[0]);
            }
            if (fds[err_index].revents) {
                pump(streams_[1]);
            }
            if (in_index >= 0 && fds[in_index].revents) {
                const ssize_t n =
                    ::write(stdin_fd.get(), call.stdin_bytes.data() + stdin_offset,
                            std::min<std::size_t>(kChunk, call.stdin_bytes.size() - stdin_offset));
                if (n > 0) {
                    stdin_offset += static_cast<std::size_t>(n);
                }
                if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
                    stdin_offset == call.stdin_bytes.size()) {
                    stdin_fd.reset();
                }
            }
            if (fds[pid_index].revents & POLLIN) {
                ::waitpid(child, &status, 0);
                exited = true;
            }
        }
        drain();
        ChildFailure failure{};
        if (::read(failure_fd.get(), &failure, sizeof failure) == sizeof failure) {
            describe_failure(failure, argv[0], cwd, reply);
        } else {
            reply.status = ExecStatus::exited;
            reply.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        }
        if (cgroup && cgroup->empty()) {
            cgroup->remove();
        }
        finish(reply);
    }

    void describe_failure(const ChildFailure& failure, const std::string& program,
                          const std::string& cwd, ExecReply& reply) {
        if (failure.stage == 5) {
            // As a shell would: 127 for a missing program, 126 for one that cannot run.
            reply.status = ExecStatus::exited;
            reply.exit_code = failure.error == ENOENT ? 127 : 126;
            const auto text = fmt::format("maf-sandbox: cannot run '{}': {}\n", program,
                                          std::strerror(failure.error));
            send_text(streams_[1], text);
            return;
        }
        reply.status = ExecStatus::failed;
        reply.exit_code = -1;
        static constexpr const char* kStages[] = {
            "joining the exec's cgroup", "switching to the guest user", "dropping capabilities",
            "entering the working directory", "installing the seccomp filter"};
        reply.message = failure.stage == 3
                            ? fmt::format("the working directory {} cannot be entered: {}", cwd,
                                          std::strerror(failure.error))
                            : fmt::format("{} failed: {}", kStages[failure.stage],
                                          std::strerror(failure.error));
    }

    void kill_tree(const std::optional<ExecCgroupParent::Child>& cgroup, pid_t child) {
        if (cgroup) {
            cgroup->kill_all();
            cgroup->remove();
        } else {
            ::kill(-child, SIGKILL);
        }
    }

    // Reads what is available; keeps at most the cap per stream and only counts the rest.
    void pump(Stream& stream) {
        char buffer[kChunk];
        for (;;) {
            const ssize_t n = ::read(stream.fd.get(), buffer, sizeof buffer);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                if (n == 0) {
                    eof_[stream.type == exec_wire::kStdout ? 0 : 1] = true;  // stop polling it
                }
                return;
            }
            send_text(stream, std::string_view(buffer, static_cast<std::size_t>(n)));
        }
    }

    void send_text(Stream& stream, std::string_view text) {
        stream.total += text.size();
        if (stream.sent < cap_) {
            const auto keep = std::min<std::uint64_t>(text.size(), cap_ - stream.sent);
            exec_wire::write_frame(connection_, stream.type, text.substr(0, keep));
            stream.sent += keep;
        }
    }

    void drain() {
        const auto until = Clock::now() + kDrainWindow;
        while (Clock::now() < until && !(eof_[0] && eof_[1])) {
            pollfd fds[2] = {{eof_[0] ? -1 : streams_[0].fd.get(), POLLIN, 0},
                             {eof_[1] ? -1 : streams_[1].fd.get(), POLLIN, 0}};
            const int ready = ::poll(fds, 2, static_cast<int>(kDrainQuiet.count()));
            if (ready <= 0) {
                break;
            }
            for (int i = 0; i < 2; ++i) {
                if (fds[i].revents) {
                    pump(streams_[i]);
                }
            }
        }
    }

    void finish(ExecReply& reply) {
        reply.stdout_total = streams_[0].total;
        reply.stderr_total = streams_[1].total;
    }

    int connection_;
    const ExecContext& context_;
    Stream streams_[2];
    bool eof_[2] = {false, false};
    std::uint64_t cap_ = 0;
};

}  // namespace

void serve_exec(int connection, const ExecContext& context) {
    ::signal(SIGPIPE, SIG_IGN);
    Exec(connection, context).run();
}

}  // namespace maf_sandbox::runtime
