// The asynchronous exec client (LocalSandbox's) against the blocking one (the CLI's front end and
// the emulator's), facing the same stand-in supervisor: the same errors, word for word, and the
// same heads under the output cap.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json/serialize.hpp>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/exec_client.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"
#include "sandbox_fixture.hpp"

namespace maf_sandbox::local {
namespace {

using namespace std::chrono_literals;
using runtime::ExecCall;
using runtime::ExecReply;
namespace wire = runtime::exec_wire;

// Accepts connections on a unix socket, one at a time on its own thread, and hands each to
// `serve`; stops (and joins) when destroyed.
class StandInSupervisor {
  public:
    explicit StandInSupervisor(std::function<void(int)> serve)
        : path_(dir_.path() / "supervisor.sock"), serve_(std::move(serve)) {
        listener_ = runtime::UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        const auto address = runtime::supervisor_address(path_);
        if (!listener_ ||
            ::bind(listener_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) !=
                0 ||
            ::listen(listener_.get(), 8) != 0) {
            throw std::runtime_error("cannot listen for the stand-in supervisor");
        }
        thread_ = std::thread([this] {
            for (;;) {
                runtime::UniqueFd connection(
                    ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
                if (!connection) {
                    return;  // shut down
                }
                serve_(connection.get());
            }
        });
    }
    ~StandInSupervisor() {
        ::shutdown(listener_.get(), SHUT_RDWR);  // wakes accept
        thread_.join();
    }
    const std::filesystem::path& path() const { return path_; }

  private:
    runtime::testing::StateDir dir_;
    std::filesystem::path path_;
    std::function<void(int)> serve_;
    runtime::UniqueFd listener_;
    std::thread thread_;
};

void read_request(int connection) {
    char type = 0;
    std::string payload;
    wire::read_frame(connection, type, payload, wire::kMaxRequestBytes);
    wire::read_frame(connection, type, payload, wire::kMaxStdinBytes);
}

// Holds the connection until the client hangs up.
void wait_for_hang_up(int connection) {
    char byte = 0;
    while (::read(connection, &byte, 1) > 0) {
    }
}

std::function<void(int)> answering(std::vector<std::pair<char, std::string>> frames) {
    return [frames = std::move(frames)](int connection) {
        read_request(connection);
        for (const auto& [type, payload] : frames) {
            wire::write_frame(connection, type, payload);
        }
        wait_for_hang_up(connection);
    };
}

ExecCall short_call() {
    ExecCall call;
    call.command = std::vector<std::string>{"true"};
    call.timeout = 50ms;
    call.max_output_bytes = 10;
    call.stdin_bytes = "in";
    return call;
}

std::string result_json(int exit_code, std::uint64_t stdout_total, std::uint64_t stderr_total) {
    ExecReply reply;
    reply.status = runtime::ExecStatus::exited;
    reply.exit_code = exit_code;
    reply.stdout_total = stdout_total;
    reply.stderr_total = stderr_total;
    return boost::json::serialize(wire::to_json(reply));
}

// What each client reports when the supervisor at `socket` fails it: {blocking, asynchronous}.
std::pair<std::string, std::string> unreachable_messages(const std::filesystem::path& socket,
                                                         const ExecCall& call) {
    const auto message = [](const std::function<void()>& run) -> std::string {
        try {
            run();
        } catch (const SandboxOutputUnreachable& e) {
            return e.what();
        }
        return "(no SandboxOutputUnreachable)";
    };
    return {message([&] { runtime::call_exec(socket, call, 50ms); }),
            message([&] { run_blocking(call_exec_async(socket, call, {}, 50ms)); })};
}

TEST(ExecClientParity, ARefusedConnectionReadsTheSame) {
    runtime::testing::StateDir dir;
    const auto [blocking, async] = unreachable_messages(dir.path() / "gone.sock", short_call());
    EXPECT_EQ(async, blocking);
    EXPECT_NE(async.find("refused the connection (No such file or directory)"), std::string::npos)
        << async;
}

TEST(ExecClientParity, NoAnswerWithinTimeoutPlusGraceReadsTheSame) {
    StandInSupervisor silent(wait_for_hang_up);
    const auto [blocking, async] = unreachable_messages(silent.path(), short_call());
    EXPECT_EQ(async, blocking);
    EXPECT_NE(async.find("did not answer within the exec's timeout plus a grace period"),
              std::string::npos)
        << async;
}

TEST(ExecClientParity, AHangUpReadsTheSame) {
    StandInSupervisor hangs_up(read_request);
    const auto [blocking, async] = unreachable_messages(hangs_up.path(), short_call());
    EXPECT_EQ(async, blocking);
    EXPECT_NE(async.find("hung up during the exec"), std::string::npos) << async;
}

TEST(ExecClientParity, AFrameLargerThanTheWireAllowsIsAHangUp) {
    StandInSupervisor confused([](int connection) {
        read_request(connection);
        const auto header = wire::frame_header(wire::kStdout, wire::kMaxRequestBytes + 1);
        [[maybe_unused]] auto sent = ::write(connection, header.data(), header.size());
        wait_for_hang_up(connection);
    });
    const auto [blocking, async] = unreachable_messages(confused.path(), short_call());
    EXPECT_EQ(async, blocking);
    EXPECT_NE(async.find("hung up during the exec"), std::string::npos) << async;
}

TEST(ExecClientParity, AMalformedResultReadsTheSame) {
    StandInSupervisor garbled(answering({{wire::kResult, "not json"}}));
    const auto [blocking, async] = unreachable_messages(garbled.path(), short_call());
    EXPECT_EQ(async, blocking);
    EXPECT_NE(async.find("sent a malformed result"), std::string::npos) << async;
}

TEST(ExecClientParity, BothKeepTheSameHeadsUnderTheCap) {
    StandInSupervisor chatty(answering({{wire::kStdout, "12345"},
                                        {wire::kStderr, "e"},
                                        {wire::kStdout, "67890"},
                                        {wire::kStdout, "past the cap"},
                                        {wire::kResult, result_json(3, 22, 1)}}));
    auto call = short_call();
    call.timeout = 10s;
    const auto blocking = runtime::call_exec(chatty.path(), call);
    const auto async = run_blocking(call_exec_async(chatty.path(), call));
    for (const auto* reply : {&blocking, &async}) {
        EXPECT_EQ(reply->status, runtime::ExecStatus::exited);
        EXPECT_EQ(reply->exit_code, 3);
        EXPECT_EQ(reply->stdout_head, "1234567890");
        EXPECT_EQ(reply->stderr_head, "e");
        EXPECT_EQ(reply->stdout_total, 22u);
        EXPECT_TRUE(reply->truncated());
    }
}

TEST(ExecClientParity, AMalformedCallIsRefusedBeforeConnecting) {
    runtime::testing::StateDir dir;
    auto call = short_call();
    call.command = std::vector<std::string>{};
    EXPECT_THROW(run_blocking(call_exec_async(dir.path() / "gone.sock", call)), InvalidArgument);
    call.command = std::vector<std::string>{"true"};
    call.cwd = "relative";
    EXPECT_THROW(run_blocking(call_exec_async(dir.path() / "gone.sock", call)), InvalidArgument);
}

}  // namespace
}  // namespace maf_sandbox::local
