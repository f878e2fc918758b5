#include "maf_sandbox/core/paths.hpp"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox {
namespace {

// --- normpath: every row checked against CPython's posixpath.normpath. ------------------------

struct NormpathCase {
    const char* input;
    const char* expected;
};

TEST(Normpath, MatchesPythonPosixpathOnEveryEdgeCase) {
    const NormpathCase cases[] = {
        {"", "."},
        {".", "."},
        {"./", "."},
        {"..", ".."},
        {"../..", "../.."},
        {"a/../..", ".."},
        {"a/../../b", "../b"},
        {"/", "/"},
        {"//", "//"},
        {"///", "/"},
        {"////a", "/a"},
        {"//a//b", "//a/b"},
        {"/..", "/"},
        {"/../..", "/"},
        {"/../a", "/a"},
        {"//..", "//"},
        {"/a/b/../c", "/a/c"},
        {"/a/./b/.", "/a/b"},
        {"/a/b/", "/a/b"},
        {"a//b", "a/b"},
        {"a/b/..", "a"},
        {"a/..", "."},
        {"./a", "a"},
        {"/maf-sandbox/work/../work-outside/x", "/maf-sandbox/work-outside/x"},
        {"...", "..."},
        {"a/.../b", "a/.../b"},
    };
    for (const auto& row : cases) {
        EXPECT_EQ(normpath(row.input), row.expected) << "input '" << row.input << "'";
    }
}

TEST(JoinGuestPath, AnAbsoluteTailReplacesTheHead) {
    EXPECT_EQ(join_guest_path("/w", "/etc/passwd"), "/etc/passwd");
    EXPECT_EQ(join_guest_path("/w", "a"), "/w/a");
    EXPECT_EQ(join_guest_path("/w/", "a"), "/w/a");
    EXPECT_EQ(join_guest_path("", "a"), "a");
    EXPECT_EQ(join_guest_path("/w", ""), "/w/");
}

TEST(GuestDirname, MatchesPosixpathDirname) {
    EXPECT_EQ(guest_dirname("/a/b"), "/a");
    EXPECT_EQ(guest_dirname("/a"), "/");
    EXPECT_EQ(guest_dirname("/"), "/");
    EXPECT_EQ(guest_dirname("//a"), "//");
    EXPECT_EQ(guest_dirname("a"), "");
    EXPECT_EQ(guest_dirname("a/b//c"), "a/b");
    EXPECT_EQ(guest_dirname("/a/b/"), "/a/b");
}

// --- confine_guest_path --------------------------------------------------------------------------

TEST(ConfineGuestPath, ARelativePathResolvesInsideTheWorkingDirectory) {
    EXPECT_EQ(confine_guest_path("a/b.txt", "/w"), "/w/a/b.txt");
    EXPECT_EQ(confine_guest_path("a/../b.txt", "/w"), "/w/b.txt");
    EXPECT_EQ(confine_guest_path("x", "/w/"), "/w/x");
}

TEST(ConfineGuestPath, DotAndEmptyNameTheWorkingDirectoryItself) {
    EXPECT_EQ(confine_guest_path("", "/w"), "/w");
    EXPECT_EQ(confine_guest_path(".", "/w"), "/w");
    EXPECT_EQ(confine_guest_path("a/..", "/w/./"), "/w");
}

TEST(ConfineGuestPath, DotDotThatClimbsOutIsAnEscape) {
    EXPECT_THROW(confine_guest_path("..", "/w"), ConfinementEscape);
    EXPECT_THROW(confine_guest_path("../w-outside/x", "/w"), ConfinementEscape);
    EXPECT_THROW(confine_guest_path("a/../../x", "/w"), ConfinementEscape);
}

TEST(ConfineGuestPath, ASiblingThatSharesThePrefixIsOutside) {
    EXPECT_THROW(confine_guest_path("/w-outside/x", "/w"), ConfinementEscape);
}

TEST(ConfineGuestPath, AbsolutePathsInsideAreAcceptedAndOutsideRefused) {
    EXPECT_EQ(confine_guest_path("/w/sub/f", "/w"), "/w/sub/f");
    EXPECT_THROW(confine_guest_path("/etc/passwd", "/w"), ConfinementEscape);
}

TEST(ConfineGuestPath, ABackslashIsRefusedEvenInside) {
    EXPECT_THROW(confine_guest_path("sub\\file.txt", "/w"), ConfinementEscape);
    EXPECT_THROW(confine_guest_path("..\\x", "/w"), ConfinementEscape);
}

TEST(ConfineGuestPath, ANulByteIsRefused) {
    EXPECT_THROW(confine_guest_path(std::string("a\0b", 3), "/w"), ConfinementEscape);
}

TEST(ConfineGuestPath, AnEscapeIsAnInvalidArgument) {
    try {
        confine_guest_path("../x", "/w");
        FAIL() << "no escape reported";
    } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("outside the working directory"), std::string::npos);
    }
}

TEST(ConfineGuestPath, ARootWorkingDirectoryConfinesNothingAbsolute) {
    EXPECT_EQ(confine_guest_path("/etc/passwd", "/"), "/etc/passwd");
    EXPECT_EQ(confine_guest_path("../..", "/"), "/");
}

// --- guest_path_relative_to ----------------------------------------------------------------------

TEST(GuestPathRelativeTo, EqualPathsAreTheEmptyRemainder) {
    EXPECT_EQ(guest_path_relative_to("/a/b/", "/a/b"), "");
}

TEST(GuestPathRelativeTo, ADescendantGivesItsRemainder) {
    EXPECT_EQ(guest_path_relative_to("/a/b/c/d", "/a/b"), "c/d");
    EXPECT_EQ(guest_path_relative_to("/a/x/../b/c", "/a/b"), "c");
}

TEST(GuestPathRelativeTo, PrefixesAreComparedComponentWise) {
    EXPECT_EQ(guest_path_relative_to("/a/sub2", "/a/sub"), std::nullopt);
    EXPECT_EQ(guest_path_relative_to("/a", "/a/sub"), std::nullopt);
}

TEST(GuestPathRelativeTo, TheRootContainsEveryAbsolutePath) {
    EXPECT_EQ(guest_path_relative_to("/x/y", "/"), "x/y");
    EXPECT_EQ(guest_path_relative_to("/", "/"), "");
}

// --- guest_directory_chain -----------------------------------------------------------------------

TEST(GuestDirectoryChain, WalksFromTheRootThroughTheWorkingDirectoryThenThePath) {
    const std::vector<std::string> expected{"/maf-sandbox", "/maf-sandbox/work",
                                            "/maf-sandbox/work/a", "/maf-sandbox/work/a/b"};
    EXPECT_EQ(guest_directory_chain("a/b", "/maf-sandbox/work"), expected);
    EXPECT_EQ(guest_directory_chain("/maf-sandbox/work/a/b", "/maf-sandbox/work/"), expected);
}

TEST(GuestDirectoryChain, TheWorkingDirectoryAloneIsItsAncestors) {
    const std::vector<std::string> expected{"/maf-sandbox", "/maf-sandbox/work"};
    EXPECT_EQ(guest_directory_chain("", "/maf-sandbox/work"), expected);
    EXPECT_EQ(guest_directory_chain(".", "/maf-sandbox/work"), expected);
}

TEST(GuestDirectoryChain, ARootWorkingDirectoryContributesNothing) {
    EXPECT_EQ(guest_directory_chain("a", "/"), std::vector<std::string>{"/a"});
    EXPECT_TRUE(guest_directory_chain("", "/").empty());
}

TEST(GuestDirectoryChain, APathOutsideIsAnEscape) {
    EXPECT_THROW(guest_directory_chain("../elsewhere", "/w"), ConfinementEscape);
}

// --- the ancestor walk over a fake no-follow stat ------------------------------------------------

// A file system of absolute paths with kinds; every stored path's ancestors are directories.
class FakeTree {
  public:
    explicit FakeTree(std::map<std::string, EntryKind> entries) : entries_(std::move(entries)) {}

    NoFollowStat stat() {
        return [this](std::string path) -> Task<std::optional<SandboxEntry>> {
            stats.push_back(path);
            co_return lookup(path);
        };
    }

    std::vector<std::string> stats;

  private:
    std::optional<SandboxEntry> lookup(const std::string& path) const {
        if (auto it = entries_.find(path); it != entries_.end()) {
            return SandboxEntry{path, it->second, std::nullopt};
        }
        for (const auto& [stored, kind] : entries_) {
            if (guest_path_relative_to(stored, path).value_or("").size() > 0) {
                return SandboxEntry{path, EntryKind::directory, std::nullopt};
            }
        }
        return std::nullopt;
    }
    std::map<std::string, EntryKind> entries_;
};

TEST(RefuseSymlinkedAncestors, PlainDirectoriesPass) {
    FakeTree tree({{"/w/a/b/file", EntryKind::file}});
    EXPECT_NO_THROW(run_blocking(refuse_symlinked_ancestors(tree.stat(), "a/b/file", "/w")));
    EXPECT_EQ(tree.stats, (std::vector<std::string>{"/w", "/w/a", "/w/a/b"}));
}

TEST(RefuseSymlinkedAncestors, ALinkedParentIsAnEscape) {
    FakeTree tree({{"/w/link", EntryKind::symlink}});
    EXPECT_THROW(run_blocking(refuse_symlinked_ancestors(tree.stat(), "link/secret", "/w")),
                 ConfinementEscape);
}

TEST(RefuseSymlinkedAncestors, ALinkedAncestorAboveTheWorkingDirectoryIsAnEscape) {
    FakeTree tree({{"/w/link", EntryKind::symlink}});
    EXPECT_THROW(run_blocking(refuse_symlinked_ancestors(tree.stat(), "leaf", "/w/link/sub")),
                 ConfinementEscape);
}

TEST(RefuseSymlinkedAncestors, AFileParentIsNotADirectoryRatherThanAnEscape) {
    FakeTree tree({{"/w/plain.txt", EntryKind::file}});
    EXPECT_THROW(run_blocking(refuse_symlinked_ancestors(tree.stat(), "plain.txt/deeper", "/w")),
                 NotADirectory);
}

TEST(RefuseSymlinkedAncestors, AMissingDirectoryEndsTheWalkSuccessfully) {
    FakeTree tree({{"/w/x", EntryKind::file}});
    EXPECT_NO_THROW(run_blocking(refuse_symlinked_ancestors(tree.stat(), "new/deeper/f", "/w")));
    EXPECT_EQ(tree.stats.back(), "/w/new");
}

TEST(RefuseSymlinkedAncestors, TheLeafIsOnlyWalkedWhenAsked) {
    FakeTree tree({{"/w/link", EntryKind::symlink}});
    EXPECT_NO_THROW(run_blocking(refuse_symlinked_ancestors(tree.stat(), "link", "/w")));
    EXPECT_THROW(run_blocking(refuse_symlinked_ancestors(tree.stat(), "link", "/w", true)),
                 ConfinementEscape);
}

TEST(RefuseSymlinkedAncestors, ALinkedWorkingDirectoryIsAnEscape) {
    FakeTree tree({{"/w/link", EntryKind::symlink}});
    EXPECT_THROW(run_blocking(refuse_symlinked_ancestors(tree.stat(), "secret", "/w/link")),
                 ConfinementEscape);
}

// --- confine_guest_write_path --------------------------------------------------------------------

TEST(ConfineGuestWritePath, ReturnsTheResolvedPathForAPlainWrite) {
    FakeTree tree({{"/w/a/existing", EntryKind::file}});
    EXPECT_EQ(run_blocking(confine_guest_write_path(tree.stat(), "a/new.txt", "/w")),
              "/w/a/new.txt");
}

TEST(ConfineGuestWritePath, TheWorkingDirectoryItselfIsRefusedInAnySpelling) {
    FakeTree tree({});
    for (const char* spelling : {"", ".", "./", "a/..", "/w"}) {
        EXPECT_THROW(run_blocking(confine_guest_write_path(tree.stat(), spelling, "/w")),
                     ConfinementEscape)
            << spelling;
    }
}

TEST(ConfineGuestWritePath, ALinkedLeafIsRefusedNotFollowed) {
    FakeTree tree({{"/w/link-file", EntryKind::symlink}});
    EXPECT_THROW(run_blocking(confine_guest_write_path(tree.stat(), "link-file", "/w")),
                 ConfinementEscape);
}

TEST(ConfineGuestWritePath, ALinkedParentIsRefused) {
    FakeTree tree({{"/w/link-dir", EntryKind::symlink}});
    EXPECT_THROW(run_blocking(confine_guest_write_path(tree.stat(), "link-dir/x", "/w")),
                 ConfinementEscape);
}

TEST(ConfineGuestWritePath, AFileParentIsNotADirectory) {
    FakeTree tree({{"/w/plain", EntryKind::file}});
    EXPECT_THROW(run_blocking(confine_guest_write_path(tree.stat(), "plain/x", "/w")),
                 NotADirectory);
}

TEST(ConfineGuestWritePath, AnEscapeIsRefusedBeforeAnyStat) {
    FakeTree tree({});
    EXPECT_THROW(run_blocking(confine_guest_write_path(tree.stat(), "../x", "/w")),
                 ConfinementEscape);
    EXPECT_TRUE(tree.stats.empty());
}

// --- resolve_working_directory and guest_call_path -----------------------------------------------

TEST(ResolveWorkingDirectory, EmptyAndDotNameTheBase) {
    EXPECT_EQ(resolve_working_directory("", "/maf-sandbox/work/"), "/maf-sandbox/work");
    EXPECT_EQ(resolve_working_directory(".", "/maf-sandbox/work"), "/maf-sandbox/work");
}

TEST(ResolveWorkingDirectory, ARelativeOneResolvesBeneathTheBase) {
    EXPECT_EQ(resolve_working_directory("call/work", "/maf-sandbox/work"),
              "/maf-sandbox/work/call/work");
}

TEST(ResolveWorkingDirectory, AnAbsoluteOneIsNormalised) {
    EXPECT_EQ(resolve_working_directory("/tmp//x/./", "/maf-sandbox/work"), "/tmp/x");
}

TEST(GuestCallPath, IsTwelveLowercaseHexBelowTheWorkDirAndRandomEachCall) {
    const std::regex shape("/maf-sandbox/work/[0-9a-f]{12}");
    std::set<std::string> seen;
    for (int i = 0; i < 20; ++i) {
        const auto path = guest_call_path("/maf-sandbox/work/");
        EXPECT_TRUE(std::regex_match(path, shape)) << path;
        seen.insert(path);
    }
    EXPECT_EQ(seen.size(), 20u);
}

}  // namespace
}  // namespace maf_sandbox
