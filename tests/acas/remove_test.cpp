// `remove` runs as the guest (README "Every `remove` runs as the guest"): `rm -f --` or `rm -rf --`
// over exec, absence confirmed through the file plane, never a file-plane delete; a missing path
// needs no command; a failed command or an entry still present is a FileError (the seed's
// OSError); symlinked parents are refused before any command.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "harness.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;
using maf_sandbox::testing::TempDir;
namespace fs = std::filesystem;

// How the guest's command for `argv` appears inside the capture script the backend sends: remove
// runs it under LC_ALL=C, since a permission refusal is read from libc's message.
std::string as_sent(const Argv& argv) {
    return shell_quote("export LC_ALL=" + shell_quote("C") + "; " + shell_join(argv));
}

std::size_t sent(testing::FakeAcasService& service, const std::string& text) {
    const auto commands = service.exec_commands();
    return static_cast<std::size_t>(std::count_if(commands.begin(), commands.end(), [&](auto& c) {
        return c.find(text) != std::string::npos;
    }));
}

struct Acquired {
    Harness h;
    std::unique_ptr<AcasBackend> backend = h.backend();
    std::shared_ptr<Sandbox> sandbox = drive(h.io, backend->acquire(kKey, h.spec([](auto& f) {
        f.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out,
                                   Capability::files_delete};
    })));
    std::string base = sandbox->base_directory();
};

TEST(AcasRemove, AFileIsRemovedByTheGuestsRmAndNeverByTheFilePlane) {
    Acquired a;
    std::ofstream(a.base + "/f.txt") << "x";
    const auto file_plane_deletes = a.h.service.count("DELETE", "/files");
    drive(a.h.io, a.sandbox->remove("f.txt", "", false));
    EXPECT_FALSE(fs::exists(a.base + "/f.txt"));
    EXPECT_EQ(sent(a.h.service, as_sent(Argv{"rm", "-f", "--", a.base + "/f.txt"})), 1u);
    EXPECT_EQ(a.h.service.count("DELETE", "/files"), file_plane_deletes);
}

TEST(AcasRemove, ADirectoryNeedsRecursiveAndIsRemovedWithRmRf) {
    Acquired a;
    fs::create_directories(a.base + "/d/e");
    std::ofstream(a.base + "/d/e/f") << "x";
    EXPECT_THROW(drive(a.h.io, a.sandbox->remove("d", "", false)), FileError);
    EXPECT_TRUE(fs::exists(a.base + "/d/e/f"));
    drive(a.h.io, a.sandbox->remove("d", "", true));
    EXPECT_FALSE(fs::exists(a.base + "/d"));
    EXPECT_EQ(sent(a.h.service, as_sent(Argv{"rm", "-rf", "--", a.base + "/d"})), 1u);
}

TEST(AcasRemove, AMissingPathIsSuccessAndSendsNoCommand) {
    Acquired a;
    const auto execs = a.h.service.count("POST", "/executeShellCommand");
    drive(a.h.io, a.sandbox->remove("never-there", "", false));
    drive(a.h.io, a.sandbox->remove("never-there", "", true));
    EXPECT_EQ(a.h.service.count("POST", "/executeShellCommand"), execs);
}

TEST(AcasRemove, AFailedGuestRmIsAFileErrorAndLeavesTheEntry) {
    Acquired a;
    fs::create_directories(a.base + "/d");
    const auto rm = as_sent(Argv{"rm", "-rf", "--", a.base + "/d"});
    a.h.service.set_rewrite([rm](std::string command) {
        if (const auto at = command.find(rm); at != std::string::npos)
            command.replace(at, rm.size(), shell_quote("echo denied >&2; exit 1"));
        return command;
    });
    try {
        drive(a.h.io, a.sandbox->remove("d", "", true));
        FAIL() << "expected FileError";
    } catch (const FileError& e) {
        EXPECT_NE(std::string(e.what()).find("denied"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::is_directory(a.base + "/d"));
}

TEST(AcasRemove, AnEntryStillPresentAfterASuccessfulRmIsAFileError) {
    Acquired a;
    fs::create_directories(a.base + "/d");
    // An image whose rm reports success and removes nothing.
    const auto rm = as_sent(Argv{"rm", "-rf", "--", a.base + "/d"});
    a.h.service.set_rewrite([rm](std::string command) {
        if (const auto at = command.find(rm); at != std::string::npos)
            command.replace(at, rm.size(), shell_quote("true"));
        return command;
    });
    try {
        drive(a.h.io, a.sandbox->remove("d", "", true));
        FAIL() << "expected FileError";
    } catch (const FileError& e) {
        EXPECT_NE(std::string(e.what()).find("still present"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::is_directory(a.base + "/d"));
}

TEST(AcasRemove, ALinkedParentIsRefusedBeforeAnyCommandAndTheTargetSurvives) {
    Acquired a;
    TempDir elsewhere;
    std::ofstream(elsewhere.path() / "keep") << "keep";
    fs::create_directory_symlink(elsewhere.path(), a.base + "/out");
    const auto execs = a.h.service.count("POST", "/executeShellCommand");
    EXPECT_THROW(drive(a.h.io, a.sandbox->remove("out/keep", "", false)), ConfinementEscape);
    EXPECT_THROW(drive(a.h.io, a.sandbox->remove("../escape", "", true)), ConfinementEscape);
    EXPECT_THROW(drive(a.h.io, a.sandbox->remove(".", "", true)), ConfinementEscape);
    EXPECT_EQ(a.h.service.count("POST", "/executeShellCommand"), execs);
    EXPECT_TRUE(fs::exists(elsewhere.path() / "keep"));
}

}  // namespace
}  // namespace maf_sandbox::acas
