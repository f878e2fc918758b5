#include "maf_sandbox/core/file_transfer.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "host_shell_sandbox.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "recording_sandbox.hpp"

namespace maf_sandbox {
namespace {

namespace fs = std::filesystem;
using testing::HostShellSandbox;
using testing::RecordingSandbox;

std::string random_bytes(std::size_t size) {
    std::mt19937 generator(1234);
    std::uniform_int_distribution<int> byte(0, 255);
    std::string bytes(size, '\0');
    for (auto& c : bytes) {
        c = static_cast<char>(byte(generator));
    }
    return bytes;
}

std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool has_staged_file(const fs::path& directory) {
    for (const auto& entry : fs::recursive_directory_iterator(directory)) {
        if (entry.path().filename().string().rfind(".maf-", 0) == 0) {
            return true;
        }
    }
    return false;
}

class ShellTransfer : public ::testing::Test {
  protected:
    void write(const std::string& path, const std::string& content, Seconds timeout = Seconds{30},
               std::size_t chunk = kShellChunkBytes) {
        run_blocking(write_file_over_exec(recorder, path, content, work(), timeout, chunk));
    }
    std::string read(const std::string& path, std::uint64_t max_bytes = 8 * kMiB) {
        return run_blocking(read_file_over_exec(recorder, path, work(), max_bytes, Seconds{30}));
    }
    std::string work() const { return host.base_directory(); }

    HostShellSandbox host;
    RecordingSandbox recorder{host};
};

TEST_F(ShellTransfer, AFileUnderOneChunkCostsThreeCommands) {
    write("small.txt", "hello\n");
    EXPECT_EQ(recorder.execs.size(), 3u);
    EXPECT_EQ(slurp(fs::path(work()) / "small.txt"), "hello\n");
    for (const auto& request : recorder.execs) {
        EXPECT_EQ(std::get<std::string>(request.command).rfind("export LC_ALL=C;", 0), 0u);
        EXPECT_EQ(request.max_output_bytes, kShellCommandOutputBytes);
    }
}

TEST_F(ShellTransfer, BinaryContentOverOneChunkRoundTripsInChunks) {
    const auto content = random_bytes(3 * kShellChunkBytes + 1000);
    write("deep/er/blob.bin", content);
    EXPECT_EQ(recorder.execs.size(), 2u + 4u);
    EXPECT_EQ(slurp(fs::path(work()) / "deep/er/blob.bin"), content);
    EXPECT_EQ(read("deep/er/blob.bin"), content);
    EXPECT_FALSE(has_staged_file(work()));
}

TEST_F(ShellTransfer, ChunksCarryFourThirdsOfTheChunkSizeInBase64) {
    write("c.bin", random_bytes(10), Seconds{30}, 6);
    ASSERT_EQ(recorder.execs.size(), 2u + 2u);
    const auto& first_chunk = std::get<std::string>(recorder.execs[1].command);
    const auto start = first_chunk.find("printf %s ");
    const auto end = first_chunk.find(" | base64 -d >> ");
    ASSERT_NE(start, std::string::npos);
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(end - (start + 10), 4u * (6u / 3u));
    EXPECT_EQ(slurp(fs::path(work()) / "c.bin"), random_bytes(10));
}

TEST_F(ShellTransfer, AnEmptyFileIsWrittenAndASecondWriteReplaces) {
    write("file.txt", "first, longer content");
    write("file.txt", "");
    EXPECT_EQ(slurp(fs::path(work()) / "file.txt"), "");
    write("file.txt", "second");
    EXPECT_EQ(read("file.txt"), "second");
}

TEST_F(ShellTransfer, InvalidPathsAreRefusedBeforeAnyCommand) {
    for (const std::string& path :
         {std::string("a\nb"), std::string("a\rb"), std::string("a\0b", 3), std::string(""),
          std::string("dir/"), std::string("."), std::string("sub/.."), std::string("..")}) {
        try {
            write(path, "x");
            FAIL() << "accepted " << path;
        } catch (const SandboxFileRefused& error) {
            EXPECT_EQ(error.refusal(), FileRefusal::invalid_path);
        }
        EXPECT_THROW(read(path), SandboxFileRefused);
    }
    EXPECT_TRUE(recorder.execs.empty());
}

TEST_F(ShellTransfer, ADirectoryTargetIsRefusedAndTheStagedFileTakenBack) {
    fs::create_directories(fs::path(work()) / "taken/inner");
    try {
        write("taken", "x");
        FAIL() << "wrote over a directory";
    } catch (const SandboxFileRefused& error) {
        EXPECT_EQ(error.refusal(), FileRefusal::is_directory);
    }
    EXPECT_TRUE(fs::is_directory(fs::path(work()) / "taken/inner"));
    EXPECT_FALSE(has_staged_file(work()));
}

TEST_F(ShellTransfer, AFileInThePlaceOfAParentIsRefused) {
    std::ofstream(fs::path(work()) / "plain") << "a file";
    EXPECT_THROW(write("plain/child.txt", "x"), SandboxFileRefused);
    EXPECT_EQ(slurp(fs::path(work()) / "plain"), "a file");
}

TEST_F(ShellTransfer, AnUnrecognisedGuestFailureIsATransferFailure) {
    recorder.rewrite = [](ExecRequest& request) {
        auto& command = std::get<std::string>(request.command);
        if (command.find("| base64 -d") != std::string::npos) {
            command = "echo 'base64: invalid input' >&2; exit 1";
        }
    };
    EXPECT_THROW(write("x.txt", "content"), SandboxShellTransferFailed);
    EXPECT_FALSE(has_staged_file(work()));
    EXPECT_FALSE(fs::exists(fs::path(work()) / "x.txt"));
}

TEST_F(ShellTransfer, TheDeadlinePassingBetweenCommandsUndoesTheTransfer) {
    recorder.exec_delay = Seconds{0.4};
    const auto started = std::chrono::steady_clock::now();
    EXPECT_THROW(write("late.bin", random_bytes(3 * kShellChunkBytes), Seconds{1.0}),
                 SandboxShellTransferFailed);
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
    EXPECT_FALSE(has_staged_file(work()));
    EXPECT_FALSE(fs::exists(fs::path(work()) / "late.bin"));
    // The last command is the take-back, with its own budget.
    EXPECT_NE(std::get<std::string>(recorder.execs.back().command).find("rm -f -- "),
              std::string::npos);
}

TEST_F(ShellTransfer, TheDeadlineExpiringDuringACommandLeavesItUnfinished) {
    recorder.rewrite = [](ExecRequest& request) {
        auto& command = std::get<std::string>(request.command);
        if (command.find("| base64 -d") != std::string::npos) {
            command = "sleep 5; " + command;
        }
    };
    const auto started = std::chrono::steady_clock::now();
    EXPECT_THROW(write("slow.txt", "content", Seconds{1.0}), SandboxShellTransferUnfinished);
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(4));
}

TEST_F(ShellTransfer, ReadRefusesMissingDirectoriesLinksAndOverCapFiles) {
    fs::create_directories(fs::path(work()) / "a-dir");
    std::ofstream(fs::path(work()) / "target.txt") << "0123456789";
    fs::create_symlink(fs::path(work()) / "target.txt", fs::path(work()) / "a-link");
    const auto refusal = [&](const std::string& path) {
        try {
            read(path);
        } catch (const SandboxFileRefused& error) {
            return error.refusal();
        }
        ADD_FAILURE() << path << " was read";
        return FileRefusal::invalid_path;
    };
    EXPECT_EQ(refusal("missing.txt"), FileRefusal::not_found);
    EXPECT_EQ(refusal("a-dir"), FileRefusal::is_directory);
    EXPECT_EQ(refusal("a-link"), FileRefusal::invalid_path);
    EXPECT_THROW(read("target.txt", 9), SandboxTransferCapExceeded);
    EXPECT_EQ(read("target.txt", 10), "0123456789");
}

TEST(Base64, RoundTripsEveryByteAndRefusesGarbage) {
    std::string all;
    for (int i = 0; i < 256; ++i) {
        all.push_back(static_cast<char>(i));
    }
    for (std::size_t size = 0; size < 5; ++size) {
        EXPECT_EQ(base64_decode(base64_encode(all.substr(0, size))), all.substr(0, size));
    }
    EXPECT_EQ(base64_decode(base64_encode(all)), all);
    EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
    EXPECT_EQ(base64_decode("Zm9v\nYg==\n"), "foob");
    EXPECT_THROW(base64_decode("Zm9v!"), InvalidArgument);
    EXPECT_THROW(base64_decode("Zm9vY"), InvalidArgument);
}

// The host shell sandbox itself: the behaviours the transfer and the suites lean on.
TEST(HostShellSandbox, QuotesArgvHonoursTheWorkingDirectoryAndKeepsExitCodes) {
    HostShellSandbox host;
    ExecRequest request;
    request.command =
        Argv{"sh", "-c", "printf '%s' \"$1\"; pwd >&2; exit 7", "probe", "a b$(echo injected)c"};
    const auto result = run_blocking(host.exec(request));
    EXPECT_EQ(result.stdout_bytes, "a b$(echo injected)c");
    EXPECT_EQ(result.stderr_bytes, host.base_directory() + "\n");
    EXPECT_EQ(result.exit_code, 7);
}

TEST(HostShellSandbox, FeedsStdinAndPassesTheEnvironment) {
    HostShellSandbox host;
    ExecRequest request;
    request.command = std::string("cat; printf %s \"$PROBE\"");
    request.stdin_bytes = "from stdin ";
    request.environment = {{"PROBE", "from env"}};
    EXPECT_EQ(run_blocking(host.exec(request)).stdout_bytes, "from stdin from env");
}

TEST(HostShellSandbox, ATimeoutKillsTheWholeProcessGroup) {
    HostShellSandbox host;
    const auto marker = fs::path(host.base_directory()) / "survived";
    ExecRequest request;
    request.command = "(sleep 2; touch " + marker.string() + ") & sleep 30";
    request.timeout = Seconds{0.5};
    const auto started = std::chrono::steady_clock::now();
    EXPECT_THROW(run_blocking(host.exec(request)), Timeout);
    const auto elapsed = std::chrono::steady_clock::now() - started;
    EXPECT_GE(elapsed, std::chrono::milliseconds(400));
    EXPECT_LT(elapsed, std::chrono::seconds(3));
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    EXPECT_FALSE(fs::exists(marker));
}

TEST(HostShellSandbox, OutputOverTheCapRaisesWithTheHead) {
    HostShellSandbox host;
    ExecRequest request;
    request.command = std::string("yes | head -c 100000");
    request.max_output_bytes = 1000;
    try {
        run_blocking(host.exec(request));
        FAIL() << "no overflow";
    } catch (const ExecOutputLimitExceeded& error) {
        EXPECT_EQ(error.stdout_head().size(), 1000u);
        EXPECT_GT(error.total_bytes(), 1000u);
    }
}

}  // namespace
}  // namespace maf_sandbox
