// Writes run as the guest (README "`write_file` always runs as the guest"): on cold acquisition,
// on the first FILES_IN use after warm reuse and in an alternate absolute working directory, no
// write ever reaches the file plane's PUT, and a guest without the transfer's utilities fails the
// write with no host retry; no host credential or variable reaches a guest command. A listing
// naming anything but direct children is refused.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "harness.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;
using maf_sandbox::testing::TempDir;
namespace fs = std::filesystem;

std::string read_host(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(AcasGuestAuthority, EveryWriteRunsAsTheGuestColdWarmAndInAnAlternateWorkingDirectory) {
    Harness h;
    TempDir alternate;
    auto backend = h.backend();
    // The removal probe's own planted file is the file plane's only PUT.
    auto cold = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto planted = h.service.count("PUT", "/files");
    drive(h.io, cold->write_file("cold.txt", "cold", ""));
    auto warm = drive(h.io, backend->acquire(kKey, h.spec()));
    drive(h.io, warm->write_file("warm.txt", "warm", ""));
    drive(h.io, warm->write_file("alt.txt", "alt", alternate.path().string()));
    EXPECT_EQ(h.service.count("PUT", "/files"), planted);
    EXPECT_EQ(read_host(fs::path(cold->base_directory()) / "cold.txt"), "cold");
    EXPECT_EQ(read_host(fs::path(warm->base_directory()) / "warm.txt"), "warm");
    EXPECT_EQ(read_host(alternate.path() / "alt.txt"), "alt");
}

TEST(AcasGuestAuthority, AGuestWithoutMvFailsTheWriteAndTheHostPlaneIsNeverTried) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto planted = h.service.count("PUT", "/files");
    // This image has no mv: the transfer's final rename fails in the guest.
    h.service.set_rewrite([](std::string command) {
        const std::string missing = "no-such-mv";
        for (auto at = command.find("mv -f"); at != std::string::npos;
             at = command.find("mv -f", at + missing.size())) {
            command.replace(at, 2, missing);
        }
        return command;
    });
    EXPECT_THROW(drive(h.io, sandbox->write_file("never.txt", "x", "")), Error);
    EXPECT_FALSE(fs::exists(fs::path(sandbox->base_directory()) / "never.txt"));
    EXPECT_EQ(h.service.count("PUT", "/files"), planted);
}

TEST(AcasGuestAuthority, NoHostCredentialOrEnvironmentReachesAGuestCommand) {
    Harness h;
    ::setenv("AZURE_CLIENT_SECRET", "host-secret-5f1c", 1);
    auto backend = h.backend();  // the token is "test-token"
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    ExecRequest request;
    request.command = std::string("printf %s \"$ASKED\"");
    request.environment = {{"ASKED", "by the request"}};
    EXPECT_EQ(drive(h.io, sandbox->exec(request)).stdout_bytes, "by the request");
    drive(h.io, sandbox->write_file("w.txt", "x", ""));
    ::unsetenv("AZURE_CLIENT_SECRET");
    ASSERT_FALSE(h.service.exec_commands().empty());
    for (const auto& command : h.service.exec_commands()) {
        EXPECT_EQ(command.find("host-secret-5f1c"), std::string::npos) << command;
        EXPECT_EQ(command.find("test-token"), std::string::npos) << command;
        EXPECT_EQ(command.find("AZURE_"), std::string::npos) << command;
    }
}

TEST(AcasGuestAuthority, AListingThatNamesAnythingButDirectChildrenIsRefused) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    fs::create_directories(fs::path(sandbox->base_directory()) / "d");
    h.service.set_fault(
        [](const net::HttpRequest&, const std::string& path) -> std::optional<net::HttpResponse> {
            if (path.ends_with("/files/list")) {
                net::HttpResponse response;
                response.headers.set("Content-Type", "application/json");
                response.body = R"({"entries":[{"name":"passwd","path":"/etc/passwd","size":1,)"
                                R"("isDir":false,"isSymlink":false}]})";
                return response;
            }
            return std::nullopt;
        });
    EXPECT_THROW(drive(h.io, sandbox->list_dir("d", "")), ConfinementEscape);
}

}  // namespace
}  // namespace maf_sandbox::acas
