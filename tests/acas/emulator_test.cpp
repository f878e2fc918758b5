// AcasBackend against a real acas-emulator process (started here on 127.0.0.1, port 0, with a
// self-signed certificate). A missing emulator binary fails every test here: a skip would let a
// build without it report these behaviours as proven.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "loopback.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/core/conformance.hpp"
#include "maf_sandbox/core/host_tools_over_exec.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

extern char** environ;

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;
using maf_sandbox::testing::TempDir;

// The build's emulator, or MAF_ACAS_EMULATOR (a binary built elsewhere).
std::string emulator_binary() {
    if (const char* over = std::getenv("MAF_ACAS_EMULATOR"); over && *over)
        return over;
#ifdef MAF_ACAS_EMULATOR_BINARY
    return MAF_ACAS_EMULATOR_BINARY;
#else
    return {};
#endif
}

// The emulator process; killed and reaped on destruction.
class Emulator {
  public:
    Emulator() {
        int out[2];
        if (::pipe(out) != 0)
            throw std::runtime_error("pipe");
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, out[1], 1);
        posix_spawn_file_actions_addclose(&actions, out[0]);
        const std::string state = (dir_.path() / "state").string();
        std::vector<std::string> args{emulator_binary(), "serve",       "--listen",
                                      "127.0.0.1:0",     "--state-dir", state,
                                      "--self-signed",   "--token",     "emulator-token"};
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        ::posix_spawn(&pid_, args[0].c_str(), &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        ::close(out[1]);
        std::string line;
        char c;
        while (::read(out[0], &c, 1) == 1 && c != '\n')
            line.push_back(c);
        ::close(out[0]);
        const std::string prefix = "listening on ";
        if (line.rfind(prefix, 0) != 0)
            throw std::runtime_error("emulator did not start: " + line);
        endpoint_ = line.substr(prefix.size());
        ca_file_ = state + "/ca.pem";
    }
    ~Emulator() {
        if (pid_ > 0) {
            ::kill(pid_, SIGTERM);
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
    }
    AcasSandboxConfig config() const {
        AcasSandboxConfig c;
        c.endpoint = endpoint_;
        c.subscription_id = "sub";
        c.resource_group = "rg";
        c.sandbox_group = "grp";
        c.ca_file = ca_file_;
        c.token = "emulator-token";
        c.emulator = true;
        c.poll_interval = Seconds{0.1};
        c.silence_preview_warning = true;
        return c;
    }

  private:
    TempDir dir_;
    pid_t pid_ = -1;
    std::string endpoint_;
    std::string ca_file_;
};

class AgainstTheEmulator : public ::testing::Test {
  protected:
    void SetUp() override {
        if (emulator_binary().empty() || !std::filesystem::exists(emulator_binary())) {
            FAIL() << "acas-emulator is not built (" << emulator_binary()
                   << "); build the acas-emulator target or set MAF_ACAS_EMULATOR";
        }
        emulator_ = std::make_unique<Emulator>();
    }
    SandboxSpec spec() const {
        SandboxSpecFields f;
        f.kind = "shell";
        f.image = "host";
        f.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out,
                                   Capability::files_list};
        return SandboxSpec(f);
    }
    std::unique_ptr<Emulator> emulator_;
    boost::asio::io_context io_;
};

TEST_F(AgainstTheEmulator, DeclaresTheRungTheEmulatorNamesNeverMicrovm) {
    AcasBackend backend(emulator_->config());
    drive(io_, backend.discover());
    EXPECT_NE(backend.isolation(), Isolation::microvm);
    EXPECT_NE(backend.isolation(), Isolation::none);
}

TEST_F(AgainstTheEmulator, PassesEveryDeclaredConformanceSuite) {
    AcasBackend backend(emulator_->config());
    drive(io_, backend.discover());
    const SandboxKey key{"scope-e", "thread-e", "agent-e", ""};
    auto sandbox = drive(io_, backend.acquire(key, spec()));
    auto declared = backend.declarations();
    PosixGuestSubject subject(sandbox, sandbox->base_directory() + "/conformance",
                              declared.capabilities);
    declared.capabilities.erase(Capability::files_delete);
    for (const auto& r : drive(io_, run_declared_suites(subject, declared))) {
        EXPECT_NE(r.status, ProbeStatus::failed) << r.suite << " " << r.name << ": " << r.detail;
    }
    drive(io_, backend.dispose(key, std::nullopt));
}

TEST_F(AgainstTheEmulator, TwoBackendsPurgeEachOthersSandboxesByLabel) {
    AcasBackend first(emulator_->config());
    AcasBackend second(emulator_->config());
    drive(io_, first.acquire(SandboxKey{"scope-p", "thread-p", "agent-1", ""}, spec()));
    drive(io_, second.acquire(SandboxKey{"scope-p", "thread-p", "agent-2", ""}, spec()));
    const auto purge = drive(io_, second.dispose_scope("scope-p", "thread-p"));
    EXPECT_EQ(purge.disposed, 2);
    EXPECT_FALSE(purge.undisposed);
}

// Issue 9's ACAS target: capture, readback and scratch removal fold into one guest command, so a
// warm exec whose output fits one answer is one HTTP request; larger output stays byte-exact.
TEST_F(AgainstTheEmulator, AWarmExecThatFitsOneAnswerIsOneRequestAndLargeOutputStaysExact) {
    AcasBackend backend(emulator_->config());
    drive(io_, backend.discover());
    const SandboxKey key{"scope-x", "thread-x", "agent-x", ""};
    auto sandbox = drive(io_, backend.acquire(key, spec()));
    ExecRequest small;
    small.command = std::string("printf 'a\\000b\\377'; printf 'e\\n\\000' >&2; exit 5");
    auto before = backend.requests_sent();
    const auto result = drive(io_, sandbox->exec(small));
    EXPECT_EQ(backend.requests_sent() - before, 1u);
    EXPECT_EQ(result.stdout_bytes, std::string("a\0b\xff", 4));
    EXPECT_EQ(result.stderr_bytes, std::string("e\n\0", 3));
    EXPECT_EQ(result.exit_code, 5);

    ExecRequest large;  // 108,894 bytes: capture, three chunks, cleanup
    large.command = std::string("seq 1 20000");
    std::string expected;
    for (int i = 1; i <= 20000; ++i)
        expected += std::to_string(i) + "\n";
    before = backend.requests_sent();
    EXPECT_EQ(drive(io_, sandbox->exec(large)).stdout_bytes, expected);
    EXPECT_EQ(backend.requests_sent() - before, 5u);

    // A write is one request per guest command (mkdir and truncate, one chunk, the move) on top
    // of the native path walk, which a stat of the same path repeats.
    before = backend.requests_sent();
    drive(io_, sandbox->write_file("three.bin", std::string(3072, '\0'), ""));
    const auto write_requests = backend.requests_sent() - before;
    before = backend.requests_sent();
    ASSERT_TRUE(drive(io_, sandbox->stat_file("three.bin", "")));
    EXPECT_EQ(write_requests - (backend.requests_sent() - before), 3u);
    EXPECT_FALSE(drive(io_, backend.dispose(key, std::nullopt)));
}

// The emulator sends a read in 1 MiB pieces: what AcasBackend reads back over that path is what it
// wrote, byte for byte (NUL and 0xff bytes, a size that is not a whole number of pieces).
TEST_F(AgainstTheEmulator, AFileReadStreamedInPiecesIsByteExact) {
    AcasBackend backend(emulator_->config());
    drive(io_, backend.discover());
    const SandboxKey key{"scope-r", "thread-r", "agent-r", ""};
    auto sandbox = drive(io_, backend.acquire(key, spec()));
    std::string bytes(3 * 1024 * 1024 + 12345, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);
    drive(io_, sandbox->write_file("streamed.bin", bytes, ""));
    const auto back = drive(io_, sandbox->read_file("streamed.bin", "", bytes.size()));
    EXPECT_EQ(back.size(), bytes.size());
    EXPECT_TRUE(back == bytes) << "the streamed read differs from what was written";
    EXPECT_FALSE(drive(io_, backend.dispose(key, std::nullopt)));
}

// The README's "exec detaches" measurement (TestWhetherThisBackendCouldServeHostTools), against
// the emulator: the host-tools launcher's exec returns while its program still runs, so the
// exit-code file is absent at return and appears afterwards.
TEST_F(AgainstTheEmulator, HostToolsExecDetachesTheExitFileAppearsAfterTheLauncherReturns) {
    AcasBackend backend(emulator_->config());
    drive(io_, backend.discover());
    const SandboxKey key{"scope-d", "thread-d", "agent-d", ""};
    SandboxSpecFields f;
    f.kind = "host-tools";
    f.image = "host";
    f.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out,
                               Capability::host_tools};
    auto sandbox = drive(io_, backend.acquire(key, SandboxSpec(f)));
    const auto layout = guest_run_layout(sandbox->base_directory() + "/detach", "program.sh");
    drive(io_, sandbox->write_file(layout.program, "sleep 1\necho finished\n", "/"));
    drive(io_, sandbox->write_file(layout.launcher, launcher_script(layout, "sh"), "/"));

    ExecRequest launch;
    launch.command = "sh " + shell_quote(layout.launcher);
    launch.working_directory = "/";
    launch.timeout = Seconds{30};
    const auto launched = drive(io_, sandbox->exec(launch));
    EXPECT_EQ(launched.exit_code, 0) << launched.stderr_text();
    EXPECT_FALSE(drive(io_, sandbox->stat_file(layout.exit_code, "/")))
        << "the exit marker existed when the launcher's exec returned: exec did not detach";

    std::optional<SandboxEntry> marker;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (!marker && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        marker = drive(io_, sandbox->stat_file(layout.exit_code, "/"));
    }
    ASSERT_TRUE(marker) << "the detached program never wrote its exit code";
    EXPECT_EQ(drive(io_, sandbox->read_file(layout.exit_code, "/", 64)), "0\n");
    EXPECT_EQ(drive(io_, sandbox->read_file(layout.output, "/", 64)), "finished\n");
    EXPECT_FALSE(drive(io_, backend.dispose(key, std::nullopt)));
}

}  // namespace
}  // namespace maf_sandbox::acas
