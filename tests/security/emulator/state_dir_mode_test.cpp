// The emulator's --state-dir is root's alone: it holds every sandbox's record, the disk images,
// the self-signed TLS key and the runtime's stores. `serve` makes a missing one (and its missing
// parents) and tightens an existing looser one to 0700, through a descriptor. The control: the
// emulator serves, and a sandbox starts and runs a command, beneath the private directory.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../emulator/emulator_fixture.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

namespace fs = std::filesystem;

struct Mode {
    mode_t mode = 0;
    uid_t uid = 1;
    bool operator==(const Mode&) const = default;
};

Mode mode_of(const fs::path& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << path;
    return {static_cast<mode_t>(st.st_mode & 07777), st.st_uid};
}

// 0 when host uid 65534 (no groups) can neither list `dir` nor stat `beneath` (both EACCES).
int reach_as_nobody(const fs::path& dir, const fs::path& beneath) {
    const pid_t child = ::fork();
    if (child == 0) {
        if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
            ::setresuid(65534, 65534, 65534) != 0) {
            ::_exit(250);
        }
        if (::open(dir.c_str(), O_RDONLY | O_DIRECTORY) >= 0 || errno != EACCES) {
            ::_exit(1);
        }
        struct stat st {};
        if (::stat(beneath.c_str(), &st) == 0 || errno != EACCES) {
            ::_exit(2);
        }
        ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

TEST(EmulatorStateDir, AnExistingLooserStateDirIsTightenedTo0700AndSandboxesStillRun) {
    TempDir dir;
    ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);  // only the state dir's own mode counts
    const auto state = dir.path() / "state";
    fs::create_directories(state);
    ASSERT_EQ(::chmod(state.c_str(), 0755), 0);
    EmulatorProcess process(state, {"--token", "test-token"});
    EXPECT_EQ(mode_of(state), (Mode{0700, 0}));

    // Control: a sandbox starts and runs beneath it.
    boost::asio::io_context io;
    SdkClient sdk(io, process.ca_file(), process.base_url());
    const auto id = sdk.create();
    sdk.wait_for_state(id, "Running");
    const auto result = sdk.exec(id, "echo private");
    EXPECT_EQ(result.at("stdout").as_string(), "private\n") << json::serialize(result);
    EXPECT_EQ(mode_of(state), (Mode{0700, 0}));
    EXPECT_EQ(reach_as_nobody(state, state / "runtime"), 0)
        << "250: could not become 65534; 1: listable; 2: traversable";
    sdk.delete_all();
}

// `serve` on a state dir that does not exist yet, two levels down: made 0700, parents made.
TEST(EmulatorStateDir, AMissingStateDirIsMade0700) {
    TempDir dir;
    const auto state = dir.path() / "new" / "state";
    const auto log = dir.path() / "emulator.log";
    int out[2];
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    const pid_t child = ::fork();
    if (child == 0) {
        ::dup2(out[1], STDOUT_FILENO);
        const int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ::dup2(err, STDERR_FILENO);
        ::execl(ACAS_EMULATOR_PATH, "acas-emulator", "serve", "--listen", "127.0.0.1:0",
                "--state-dir", state.c_str(), "--self-signed", "--token", "test-token", nullptr);
        ::_exit(127);
    }
    ::close(out[1]);
    // Its first line says it listens; the state dir is made before that.
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
        pollfd pfd{out[0], POLLIN, 0};
        if (::poll(&pfd, 1, 100) <= 0) {
            continue;
        }
        char buffer[256];
        const ssize_t n = ::read(out[0], buffer, sizeof buffer);
        if (n <= 0) {
            break;
        }
        line.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(out[0]);
    ::kill(child, SIGTERM);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(line.starts_with("listening on ")) << line << " (log: " << log << ")";
    EXPECT_EQ(mode_of(state), (Mode{0700, 0}));
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
