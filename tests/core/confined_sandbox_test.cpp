// The ConfinedSandbox base's decisions (resolve, confine, ancestor walk, leaf checks), proved over
// the in-process sandbox with its primitives wrapped to record every call the base makes.
#include "maf_sandbox/core/confined_sandbox.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/in_process.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox {
namespace {

constexpr const char* kWork = "/w";

// Passes every call through to the in-process primitives and records it as "op path".
class RecordingOps final : public GuestFileOps {
  public:
    RecordingOps(GuestFileOps& inner, std::vector<std::string>& calls)
        : inner_(inner), calls_(calls) {}

    Task<std::optional<SandboxEntry>> stat(std::string path) override {
        calls_.push_back("stat " + path);
        return inner_.stat(std::move(path));
    }
    Task<void> write(std::string path, std::string content) override {
        calls_.push_back("write " + path);
        return inner_.write(std::move(path), std::move(content));
    }
    Task<std::string> read(std::string path, std::uint64_t max_bytes) override {
        calls_.push_back("read " + path);
        return inner_.read(std::move(path), max_bytes);
    }
    Task<std::vector<SandboxEntry>> list(std::string path) override {
        calls_.push_back("list " + path);
        return inner_.list(std::move(path));
    }
    Task<void> remove(std::string path, const SandboxEntry& leaf, bool recursive) override {
        calls_.push_back("remove " + path);
        return inner_.remove(std::move(path), leaf, recursive);
    }

  private:
    GuestFileOps& inner_;
    std::vector<std::string>& calls_;
};

class RecordedSandbox final : public InProcessSandbox {
  public:
    explicit RecordedSandbox(std::vector<std::pair<std::string, SeedEntry>> seeds)
        : InProcessSandbox(options(std::move(seeds))) {}

    std::vector<std::string> calls;
    int operations = 0;

  protected:
    Task<void> with_file_ops(FileWork work) override {
        ++operations;
        FileWork recorded = [this, work = std::move(work)](GuestFileOps& inner) -> Task<void> {
            RecordingOps ops(inner, calls);
            auto task = work(ops);
            co_await std::move(task);
        };
        auto task = InProcessSandbox::with_file_ops(std::move(recorded));
        co_await std::move(task);
    }

  private:
    static InProcessSandboxOptions options(std::vector<std::pair<std::string, SeedEntry>> seeds) {
        InProcessSandboxOptions o;
        o.base_directory = kWork;
        o.seed_files = std::move(seeds);
        return o;
    }
};

using Calls = std::vector<std::string>;

TEST(ConfinedSandbox, AnEscapingPathIsRefusedBeforeAnyPrimitiveIsCalled) {
    RecordedSandbox sandbox({});
    EXPECT_THROW(run_blocking(sandbox.write_file("../x", "bytes", kWork)), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.read_file("/etc/passwd", kWork, 100)), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.stat_file("a\\b", kWork)), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.list_dir("..", kWork)), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.remove(".", kWork, true)), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.write_file(".", "bytes", kWork)), ConfinementEscape);
    EXPECT_EQ(sandbox.calls, Calls{});
    EXPECT_TRUE(sandbox.contents().empty());
}

TEST(ConfinedSandbox, EachOperationIsOneUnitOfWorkForTheBackend) {
    RecordedSandbox sandbox({{"/w/d/f.txt", std::string("x")}});
    run_blocking(sandbox.write_file("d/g.txt", "y", kWork));
    run_blocking(sandbox.stat_file("d/g.txt", kWork));
    run_blocking(sandbox.read_file("d/g.txt", kWork, 10));
    run_blocking(sandbox.list_dir("d", kWork));
    run_blocking(sandbox.remove("d/g.txt", kWork, false));
    EXPECT_EQ(sandbox.operations, 5);
}

TEST(ConfinedSandbox, TheWalkRunsFromTheRootDownThenTheLeafIsCheckedThenTheActRuns) {
    RecordedSandbox sandbox({{"/w/a/old.txt", std::string("x")}});
    run_blocking(sandbox.write_file("a/new.txt", "bytes", kWork));
    EXPECT_EQ(sandbox.calls,
              (Calls{"stat /w", "stat /w/a", "stat /w/a/new.txt", "write /w/a/new.txt"}));
    EXPECT_EQ(sandbox.contents().at("/w/a/new.txt"), "bytes");
}

TEST(ConfinedSandbox, AMissingDirectoryEndsTheWalkAndTheWriteStillLands) {
    RecordedSandbox sandbox({});
    run_blocking(sandbox.write_file("p/q/r.txt", "bytes", kWork));
    EXPECT_EQ(sandbox.calls, (Calls{"stat /w", "stat /w/p/q/r.txt", "write /w/p/q/r.txt"}));
}

TEST(ConfinedSandbox, ALinkedAncestorIsAnEscapeAndAFileAncestorIsNotADirectory) {
    RecordedSandbox sandbox({{"/w/link", EntryKind::symlink}, {"/w/plain", std::string("x")}});
    for (const char* path : {"link/x", "link/deeper/x"}) {
        EXPECT_THROW(run_blocking(sandbox.write_file(path, "b", kWork)), ConfinementEscape) << path;
        EXPECT_THROW(run_blocking(sandbox.read_file(path, kWork, 10)), ConfinementEscape) << path;
        EXPECT_THROW(run_blocking(sandbox.stat_file(path, kWork)), ConfinementEscape) << path;
        EXPECT_THROW(run_blocking(sandbox.remove(path, kWork, true)), ConfinementEscape) << path;
    }
    EXPECT_THROW(run_blocking(sandbox.write_file("plain/x", "b", kWork)), NotADirectory);
    EXPECT_THROW(run_blocking(sandbox.stat_file("plain/x", kWork)), NotADirectory);
    for (const auto& call : sandbox.calls) {
        EXPECT_EQ(call.rfind("stat ", 0), 0u) << "an act ran after a refused walk: " << call;
    }
}

TEST(ConfinedSandbox, AWriteRefusesAFinalLinkAndADirectoryWithoutWriting) {
    RecordedSandbox sandbox({{"/w/link", EntryKind::symlink}, {"/w/dir", EntryKind::directory}});
    EXPECT_THROW(run_blocking(sandbox.write_file("link", "b", kWork)), ConfinementEscape);
    try {
        run_blocking(sandbox.write_file("dir", "b", kWork));
        FAIL() << "a write onto a directory was accepted";
    } catch (const IsADirectory& e) {
        EXPECT_EQ(e.error_number(), EISDIR);
    }
    EXPECT_TRUE(sandbox.contents().empty());
}

TEST(ConfinedSandbox, AReadRefusesEveryLeafButARegularFileWithinTheCapBeforeReading) {
    RecordedSandbox sandbox({{"/w/link", EntryKind::symlink},
                             {"/w/dir", EntryKind::directory},
                             {"/w/fifo", EntryKind::other},
                             {"/w/big", std::string(11, 'b')},
                             {"/w/ok", std::string(10, 'o')}});
    EXPECT_THROW(run_blocking(sandbox.read_file("missing", kWork, 10)), FileNotFound);
    try {
        run_blocking(sandbox.read_file("link", kWork, 10));
        FAIL() << "a link was read through";
    } catch (const FileError& e) {
        EXPECT_EQ(e.error_number(), ELOOP);
    }
    EXPECT_THROW(run_blocking(sandbox.read_file("dir", kWork, 10)), IsADirectory);
    EXPECT_THROW(run_blocking(sandbox.read_file("fifo", kWork, 10)), FileError);
    EXPECT_THROW(run_blocking(sandbox.read_file("big", kWork, 10)), SandboxTransferCapExceeded);
    for (const auto& call : sandbox.calls) {
        EXPECT_EQ(call.rfind("stat ", 0), 0u) << "a refused leaf was read: " << call;
    }
    EXPECT_EQ(run_blocking(sandbox.read_file("ok", kWork, 10)), std::string(10, 'o'));
    EXPECT_EQ(sandbox.calls.back(), "read /w/ok");
}

TEST(ConfinedSandbox, AListingWalksTheDirectoryItselfAndNamesChildrenRelativeAndSorted) {
    RecordedSandbox sandbox({{"/w/link", EntryKind::symlink},
                             {"/w/file", std::string("x")},
                             {"/w/d/b.txt", std::string("bb")},
                             {"/w/d/a", EntryKind::symlink}});
    EXPECT_THROW(run_blocking(sandbox.list_dir("link", kWork)), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.list_dir("file", kWork)), NotADirectory);
    EXPECT_THROW(run_blocking(sandbox.list_dir("missing", kWork)), FileNotFound);
    const auto listing = run_blocking(sandbox.list_dir("d", kWork));
    ASSERT_EQ(listing.size(), 2u);
    EXPECT_EQ(listing[0].path, "d/a");
    EXPECT_EQ(listing[0].kind, EntryKind::symlink);
    EXPECT_EQ(listing[1].path, "d/b.txt");
    EXPECT_EQ(listing[1].size_bytes, std::optional<std::uint64_t>(2));
}

TEST(ConfinedSandbox, AStatIsRelativeToTheWorkingDirectoryAndDescribesALinkUnfollowed) {
    RecordedSandbox sandbox({{"/w/sub/link", EntryKind::symlink}});
    const auto link = run_blocking(sandbox.stat_file("link", "sub"));
    ASSERT_TRUE(link);
    EXPECT_EQ(link->path, "link");
    EXPECT_EQ(link->kind, EntryKind::symlink);
    const auto self = run_blocking(sandbox.stat_file(".", kWork));
    ASSERT_TRUE(self);
    EXPECT_EQ(self->path, "");
    EXPECT_FALSE(run_blocking(sandbox.stat_file("absent", kWork)));
}

TEST(ConfinedSandbox, ARemovalOfSomethingMissingActsOnNothingAndADirectoryNeedsRecursive) {
    RecordedSandbox sandbox({{"/w/d/f", std::string("x")}});
    run_blocking(sandbox.remove("absent", kWork, false));
    for (const auto& call : sandbox.calls) {
        EXPECT_EQ(call.rfind("stat ", 0), 0u) << call;
    }
    EXPECT_THROW(run_blocking(sandbox.remove("d", kWork, false)), IsADirectory);
    EXPECT_EQ(sandbox.contents().count("/w/d/f"), 1u);
    run_blocking(sandbox.remove("d", kWork, true));
    EXPECT_EQ(sandbox.calls.back(), "remove /w/d");
    EXPECT_TRUE(sandbox.contents().empty());
}

}  // namespace
}  // namespace maf_sandbox
