// The spare's guest process accepts the exec connection itself and reads the request ahead of its
// handler (exec_server.cpp). These prove the paths around that shortcut: a request too large to
// read ahead, connections that end before or during their request, a request the guest cannot
// launch, failures before the program starts, the OOM scores of a program and its handler, and the
// OOM kill count the host reads around every exec.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"
#include "sandbox_fixture.hpp"

namespace maf_sandbox::runtime::testing {
namespace {

UniqueFd connect_to(const SandboxHandle& handle) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const auto address = supervisor_address(handle.socket);
    if (!fd ||
        ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        throw std::runtime_error("cannot connect to the supervisor");
    }
    return fd;
}

bool send_all(int fd, std::string_view bytes) {
    return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
}

// Sends `call` as a host would and reads frames until the result (or the end).
std::optional<ExecReply> exchange(const SandboxHandle& handle, const ExecCall& call) {
    const auto connection = connect_to(handle);
    if (!send_all(connection.get(), exec_wire::request_prefix(call) + call.stdin_bytes)) {
        return std::nullopt;
    }
    ExecReplyCollector collector(handle.socket, call.max_output_bytes);
    char type = 0;
    std::string payload;
    while (exec_wire::read_frame(connection.get(), type, payload, exec_wire::kMaxRequestBytes)) {
        if (collector.take(type, payload)) {
            return collector.reply();
        }
    }
    return std::nullopt;
}

ExecCall argv_call(std::vector<std::string> argv) {
    ExecCall call;
    call.command = std::move(argv);
    call.timeout = std::chrono::seconds(30);
    call.max_output_bytes = 1 << 20;
    return call;
}

TEST(ExecHandoff, ARequestTooLargeToReadAheadIsServedWhole) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    // Larger than what the guest reads ahead (16 KiB): its handler reads it and sends the launch.
    auto call = argv_call({"sh", "-c", "printf %s \"$BIG\" | wc -c"});
    call.env.emplace_back("BIG", std::string(40 * 1024, 'x'));
    for (int i = 0; i < 3; ++i) {
        const auto reply = exec_in_sandbox(sandbox.handle(), call);
        EXPECT_EQ(reply.status, ExecStatus::exited);
        EXPECT_EQ(reply.exit_code, 0);
        EXPECT_EQ(reply.stdout_head, "40960\n");
    }
}

TEST(ExecHandoff, StdinReachesAProgramTheGuestLaunchedItself) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    auto call = argv_call({"cat"});
    call.stdin_bytes = std::string(300 * 1024, 's');  // more than one pipe buffer
    const auto reply = exec_in_sandbox(sandbox.handle(), call);
    EXPECT_EQ(reply.exit_code, 0);
    EXPECT_EQ(reply.stdout_head, call.stdin_bytes);
}

TEST(ExecHandoff, ConnectionsThatEndBeforeOrDuringTheirRequestLeaveTheSandboxServing) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    const auto request = exec_wire::request_prefix(argv_call({"true"}));
    for (int i = 0; i < 3; ++i) {
        connect_to(sandbox.handle());  // connected and closed, nothing sent
        const auto partial = connect_to(sandbox.handle());
        ASSERT_TRUE(send_all(partial.get(), std::string_view(request).substr(0, 9)));
    }
    const auto reply = sandbox.sh("echo still serving");
    EXPECT_EQ(reply.exit_code, 0);
    EXPECT_EQ(reply.stdout_head, "still serving\n");
}

TEST(ExecHandoff, AHostGoneBeforeItsRequestIsWholeGetsTheLaunchedTreeKilled) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    {
        const auto connection = connect_to(sandbox.handle());
        const auto call = argv_call({"sh", "-c", "sleep 30 & sleep 30"});
        // The request frame whole, which the guest reads ahead and launches, but not the stdin
        // frame that follows it, which the handler then never gets.
        const auto prefix = exec_wire::request_prefix(call);
        ASSERT_TRUE(send_all(
            connection.get(),
            std::string_view(prefix).substr(0, prefix.size() - exec_wire::kFrameHeaderBytes)));
        ::usleep(50 * 1000);  // the guest is launching by now
    }
    // The handler, finding the host gone before the request was whole, kills the tree the guest
    // started. Poll until no `sleep 30` is left in the sandbox.
    std::string left;
    for (int i = 0; i < 50; ++i) {
        left = sandbox
                   .sh("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done 2>/dev/null"
                       " | grep -c '^sleep 30 $' || true")
                   .stdout_head;
        if (left == "0\n") {
            break;
        }
        ::usleep(100 * 1000);
    }
    EXPECT_EQ(left, "0\n");
}

TEST(ExecHandoff, AnEmptyArgvIsAnsweredAsAFailureNotADroppedConnection) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    const auto reply = exchange(sandbox.handle(), argv_call({}));
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, ExecStatus::failed);
    EXPECT_NE(reply->message.find("empty"), std::string::npos) << reply->message;
    EXPECT_EQ(sandbox.sh("echo next").stdout_head, "next\n");
}

TEST(ExecHandoff, TheProgramHoldsNoDescriptorOfTheExecPathOnlyItsStdio) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    // The guest process held the listener, the connection and the hand-over channel before it
    // started the program: none may reach it (3 is ls's own handle on the directory).
    const auto reply = exec_in_sandbox(sandbox.handle(), argv_call({"ls", "-1", "/proc/self/fd"}));
    EXPECT_EQ(reply.exit_code, 0);
    EXPECT_EQ(reply.stdout_head, "0\n1\n2\n3\n");
}

// The children of the sandbox's PID 1 that are supervisor processes (its spare handlers; a handler
// serving an exec too, but none runs here), as the host sees them.
std::vector<pid_t> spare_handlers(const SandboxHandle& handle) {
    std::ifstream children(fmt::format("/proc/{0}/task/{0}/children", handle.pid));
    std::vector<pid_t> pids;
    for (pid_t pid = 0; children >> pid;) {
        std::ifstream comm(fmt::format("/proc/{}/comm", pid));
        std::string name;
        if (std::getline(comm, name) && name.starts_with("maf-sandbox-sup")) {
            pids.push_back(pid);
        }
    }
    return pids;
}

TEST(ExecHandoff, AGuestWhoseHandlerDiedNeverTakesAConnection) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    ASSERT_EQ(sandbox.sh("true").exit_code, 0);  // two spares from now on
    ::usleep(100 * 1000);
    const auto spares = spare_handlers(sandbox.handle());
    ASSERT_FALSE(spares.empty());
    for (const pid_t pid : spares) {
        ::kill(pid, SIGKILL);  // as the OOM killer could; their guests wait in accept
    }
    // Once PID 1 has reaped them. (A guest killed in the instant after it accepted drops that one
    // connection, as a handler killed then would: not what this proves.)
    for (const pid_t pid : spares) {
        for (int i = 0; i < 200 && std::filesystem::exists(fmt::format("/proc/{}", pid)); ++i) {
            ::usleep(10 * 1000);
        }
    }
    // A prepared guest outliving its handler would take the next connection and, with nobody to
    // hand it to, drop it: every one of these must be answered.
    for (int i = 0; i < 4; ++i) {
        const auto reply = sandbox.sh(fmt::format("echo {}", i));
        EXPECT_EQ(reply.exit_code, 0);
        EXPECT_EQ(reply.stdout_head, fmt::format("{}\n", i));
    }
}

// The guest process reports why it could not start the program with raw system calls, while it
// still runs in its handler's memory (exec_guest.hpp): each cause must arrive as itself, whether
// the guest read the request itself or its handler sent the launch (a request over 16 KiB).
TEST(ExecHandoff, WhyAProgramCouldNotStartIsReportedWithItsCauseOnEitherPath) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    for (const std::size_t padding : {std::size_t{0}, std::size_t{40 * 1024}}) {
        SCOPED_TRACE(fmt::format("padding {}", padding));
        const auto call = [&](std::vector<std::string> argv, std::string cwd = "") {
            auto made = argv_call(std::move(argv));
            made.cwd = std::move(cwd);
            if (padding > 0) {
                made.env.emplace_back("PADDING", std::string(padding, 'x'));
            }
            return exec_in_sandbox(sandbox.handle(), made);
        };
        const auto missing = call({"no-such-program-here"});
        EXPECT_EQ(missing.status, ExecStatus::exited);
        EXPECT_EQ(missing.exit_code, 127);
        EXPECT_EQ(missing.stderr_head,
                  "maf-sandbox: cannot run 'no-such-program-here': No such file or directory\n");
        const auto not_executable = call({"/etc/hostname"});
        EXPECT_EQ(not_executable.exit_code, 126);
        EXPECT_EQ(not_executable.stderr_head,
                  "maf-sandbox: cannot run '/etc/hostname': Permission denied\n");
        const auto no_directory = call({"true"}, "/no/such/directory");
        EXPECT_EQ(no_directory.status, ExecStatus::failed);
        EXPECT_EQ(no_directory.message,
                  "the working directory /no/such/directory cannot be entered: No such file or "
                  "directory");
        EXPECT_EQ(call({"true"}).exit_code, 0);
    }
}

std::string oom_score_adj(pid_t pid) {
    std::ifstream file(fmt::format("/proc/{}/oom_score_adj", pid));
    std::string value;
    std::getline(file, value);
    return value;
}

// The guest raises its OOM score while it shares its handler's memory, which raises the handler's
// too: the handler sets its own back once the program runs, so that a memory-hungry sandbox loses
// the program (reported as killed) before the process that reports on it.
TEST(ExecHandoff, TheProgramIsTheOomKillersFirstChoiceAndItsHandlerIsNot) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    std::thread exec([&] { sandbox.sh("exec sleep 3"); });
    pid_t program = 0;
    pid_t handler = 0;
    for (int i = 0; i < 400 && program == 0; ++i) {
        for (const pid_t candidate : spare_handlers(sandbox.handle())) {
            std::ifstream children(fmt::format("/proc/{0}/task/{0}/children", candidate));
            for (pid_t child = 0; children >> child;) {
                std::ifstream comm(fmt::format("/proc/{}/comm", child));
                std::string name;
                if (std::getline(comm, name) && name == "sleep") {
                    program = child;
                    handler = candidate;
                }
            }
        }
        ::usleep(10 * 1000);
    }
    if (program == 0) {
        exec.join();  // the sleep ends by itself; a joinable thread must not be destroyed
        FAIL() << "the exec's program was never seen";
    }
    std::string handler_score;
    for (int i = 0; i < 200 && (handler_score = oom_score_adj(handler)) != "0"; ++i) {
        ::usleep(10 * 1000);
    }
    EXPECT_EQ(handler_score, "0");
    EXPECT_EQ(oom_score_adj(program), "1000");
    ::kill(program, SIGKILL);
    exec.join();
}

TEST(ExecHandoff, TheOomKillCountIsReadFromItsLineInEitherLayout) {
    EXPECT_EQ(cgroup_detail::parse_oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"),
              7u);
    EXPECT_EQ(cgroup_detail::parse_oom_kill_count(
                  "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 1\n"),
              2u);
    EXPECT_EQ(cgroup_detail::parse_oom_kill_count("oom_kill_disable 1\n"), 0u);
    EXPECT_EQ(cgroup_detail::parse_oom_kill_count(""), 0u);
}

}  // namespace
}  // namespace maf_sandbox::runtime::testing
