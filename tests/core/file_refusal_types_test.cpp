// What a caller can catch when a shell file transfer ends badly: a guest permission refusal is
// both a file refusal and the protocol's permission-denied type (the seed's PermissionError); a
// timeout before a command was sent (a queued one, e.g. a service's Retry-After) takes the staged
// file back and stays the caller's timeout, while one during a command leaves the transfer
// unfinished.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "host_shell_sandbox.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/file_transfer.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "recording_sandbox.hpp"

namespace maf_sandbox {
namespace {

namespace fs = std::filesystem;
using testing::HostShellSandbox;
using testing::RecordingSandbox;

bool has_staged_file(const fs::path& directory) {
    for (const auto& entry : fs::directory_iterator(directory)) {
        if (entry.path().filename().string().starts_with(".maf-")) {
            return true;
        }
    }
    return false;
}

class FileRefusalTypes : public ::testing::Test {
  protected:
    void write(const std::string& path, const std::string& content) {
        run_blocking(write_file_over_exec(recorder, path, content, work(), Seconds{30}));
    }
    std::string read(const std::string& path) {
        return run_blocking(read_file_over_exec(recorder, path, work(), 1024, Seconds{30}));
    }
    std::string work() const { return host.base_directory(); }

    // The guest answers the command containing `needle` the way a real guest refuses a write
    // into a directory it may not write (this suite runs as root, whom permissions never stop).
    void refuse_commands_with(std::string needle, std::string message) {
        recorder.rewrite = [needle, message](ExecRequest& request) {
            auto& command = std::get<std::string>(request.command);
            if (command.find(needle) != std::string::npos) {
                command = "echo '" + message + "' >&2; exit 1";
            }
        };
    }

    HostShellSandbox host;
    RecordingSandbox recorder{host};
};

TEST_F(FileRefusalTypes, AGuestPermissionRefusalOfAWriteIsAFileRefusalAndAPermissionError) {
    refuse_commands_with("mv -f", "mv: cannot move 'a' to 'b': Permission denied");
    try {
        write("out.txt", "x");
        FAIL() << "the write was not refused";
    } catch (const PermissionDenied& error) {
        EXPECT_EQ(error.error_number(), EACCES);
        const auto* refused = dynamic_cast<const SandboxFileRefused*>(&error);
        ASSERT_NE(refused, nullptr) << "also a file refusal";
        EXPECT_EQ(refused->refusal(), FileRefusal::permission_denied);
    }
    EXPECT_FALSE(has_staged_file(work()));
    // The same refusal, caught by each family a caller may know.
    EXPECT_THROW(write("out.txt", "x"), SandboxFileRefused);
    EXPECT_THROW(write("out.txt", "x"), FileError);
    EXPECT_THROW(write("out.txt", "x"), Error);
}

TEST_F(FileRefusalTypes, AGuestPermissionRefusalOfAReadIsAPermissionErrorToo) {
    std::ofstream(fs::path(work()) / "secret.txt") << "s";
    refuse_commands_with("wc -c", "maf-sandbox: Permission denied");
    EXPECT_THROW(read("secret.txt"), PermissionDenied);
    EXPECT_THROW(read("secret.txt"), SandboxFileRefused);
    recorder.rewrite = nullptr;
    EXPECT_EQ(read("secret.txt"), "s");  // control: unrefused, it reads
}

TEST_F(FileRefusalTypes, OtherRefusalsAreFileRefusalsButNotPermissionErrors) {
    fs::create_directories(fs::path(work()) / "a-dir");
    try {
        write("a-dir", "x");
        FAIL() << "writing over a directory was not refused";
    } catch (const PermissionDenied&) {
        FAIL() << "a directory in the way is not a permission refusal";
    } catch (const SandboxFileRefused& error) {
        EXPECT_EQ(error.refusal(), FileRefusal::is_directory);
    }
    EXPECT_THROW(throw_file_refused(FileRefusal::not_found, "gone"), SandboxFileRefused);
    try {
        throw_file_refused(FileRefusal::invalid_path, "bad");
    } catch (const PermissionDenied&) {
        FAIL() << "invalid_path is not a permission refusal";
    } catch (const SandboxFileRefused&) {
    }
    EXPECT_THROW(throw_file_refused(FileRefusal::permission_denied, "no"), PermissionDenied);
}

TEST_F(FileRefusalTypes, AQueuedTimeoutBeforeACommandTakesTheStagedFileBackAndStaysATimeout) {
    int execs = 0;
    recorder.rewrite = [&execs](ExecRequest&) {
        // The second command (the first chunk) is held back until its deadline: never sent.
        if (++execs == 2) {
            throw SandboxQueuedTimeout("held back by the service until the deadline");
        }
    };
    try {
        write("out.txt", "payload");
        FAIL() << "the transfer did not report its timeout";
    } catch (const SandboxShellTransferUnfinished& error) {
        FAIL() << "nothing ran, yet it was reported unfinished: " << error.what();
    } catch (const SandboxQueuedTimeout&) {
    }
    EXPECT_FALSE(has_staged_file(work())) << "the staged sibling was taken back";
    EXPECT_FALSE(fs::exists(fs::path(work()) / "out.txt"));
    // stage, the held-back chunk, the take-back
    ASSERT_EQ(recorder.execs.size(), 2u);
    EXPECT_EQ(execs, 3);
}

TEST_F(FileRefusalTypes, AQueuedTimeoutOfAReadIsTheTimeoutAsItIs) {
    std::ofstream(fs::path(work()) / "in.txt") << "i";
    recorder.rewrite = [](ExecRequest&) { throw SandboxQueuedTimeout("held back"); };
    EXPECT_THROW(read("in.txt"), SandboxQueuedTimeout);
}

TEST_F(FileRefusalTypes, AnOrdinaryTimeoutDuringACommandStillLeavesTheTransferUnfinished) {
    int execs = 0;
    recorder.rewrite = [&execs](ExecRequest&) {
        if (++execs == 2) {
            throw Timeout("the command was in flight at the deadline");
        }
    };
    EXPECT_THROW(write("out.txt", "payload"), SandboxShellTransferUnfinished);
}

}  // namespace
}  // namespace maf_sandbox
