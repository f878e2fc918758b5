#include "maf_sandbox/runtime/kernel/guest_fs.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "maf_sandbox/core/errors.hpp"
#include "temp_dir.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr GuestOwner kOwner{1234, 2345};

std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
}

void put(const fs::path& path, const std::string& content) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << content;
}

class GuestFsTest : public ::testing::Test {
  protected:
    GuestFsTest() : root(temp.path() / "root"), outside(temp.path() / "outside") {
        fs::create_directories(root);
        fs::create_directories(outside / "dir");
        put(outside / "secret.txt", "SECRET");
        put(outside / "dir" / "canary", "CANARY");
        guest.emplace(GuestFs::open(root, kOwner));
    }
    GuestFs& fs_() { return *guest; }

    TempDir temp;
    fs::path root;
    fs::path outside;
    std::optional<GuestFs> guest;
};

TEST_F(GuestFsTest, StatDescribesFileDirectoryAndLinkWithoutFollowing) {
    put(root / "a" / "f.txt", "hello");
    fs::create_symlink(outside / "secret.txt", root / "a" / "link");
    const auto file = fs_().stat("/a/f.txt");
    ASSERT_TRUE(file);
    EXPECT_EQ(file->kind, EntryKind::file);
    EXPECT_EQ(file->size_bytes, 5u);
    const auto dir = fs_().stat("/a");
    ASSERT_TRUE(dir);
    EXPECT_EQ(dir->kind, EntryKind::directory);
    EXPECT_EQ(dir->size_bytes, std::nullopt);
    const auto link = fs_().stat("/a/link");
    ASSERT_TRUE(link);
    EXPECT_EQ(link->kind, EntryKind::symlink);
    EXPECT_EQ(link->size_bytes, std::nullopt);
    EXPECT_EQ(fs_().stat("/")->kind, EntryKind::directory);
}

TEST_F(GuestFsTest, StatOfMissingPathOrMissingAncestorIsAbsent) {
    EXPECT_EQ(fs_().stat("/nope"), std::nullopt);
    EXPECT_EQ(fs_().stat("/nope/deeper/x"), std::nullopt);
}

TEST_F(GuestFsTest, AncestorLinkIsAnEscapeWhateverItsTarget) {
    fs::create_symlink(outside, root / "abs");          // absolute target outside
    fs::create_symlink("../outside", root / "dotdot");  // `..` inside the target
    fs::create_directories(root / "real");
    fs::create_symlink("real", root / "inner");  // even a link staying inside
    for (const char* path : {"/abs/secret.txt", "/dotdot/secret.txt", "/inner/x"}) {
        EXPECT_THROW(fs_().stat(path), ConfinementEscape) << path;
        EXPECT_THROW(fs_().read(path, 100), ConfinementEscape) << path;
        EXPECT_THROW(fs_().write(std::string(path) + "2", "x"), ConfinementEscape) << path;
        EXPECT_THROW(fs_().remove(path, true), ConfinementEscape) << path;
        EXPECT_THROW(fs_().mkdirs(std::string(path) + "/d"), ConfinementEscape) << path;
    }
    EXPECT_THROW(fs_().list("/abs"), ConfinementEscape);
    EXPECT_THROW(fs_().list("/abs/dir"), ConfinementEscape);
    EXPECT_EQ(slurp(outside / "secret.txt"), "SECRET");
    EXPECT_TRUE(fs::exists(outside / "dir" / "canary"));
    EXPECT_FALSE(fs::exists(outside / "secret.txt2"));
}

TEST_F(GuestFsTest, NonDirectoryAncestorIsNotADirectory) {
    put(root / "file", "x");
    EXPECT_THROW(fs_().stat("/file/child"), NotADirectory);
    EXPECT_THROW(fs_().read("/file/child", 10), NotADirectory);
    EXPECT_THROW(fs_().write("/file/child", "x"), NotADirectory);
    EXPECT_THROW(fs_().list("/file"), NotADirectory);
    EXPECT_THROW(fs_().remove("/file/child", false), NotADirectory);
}

TEST_F(GuestFsTest, ReadReturnsTheBytesOfARegularFile) {
    std::string binary("a\0b\r\n\xff", 6);
    put(root / "data.bin", binary);
    EXPECT_EQ(fs_().read("/data.bin", 6), binary);
    EXPECT_EQ(fs_().read("/./x/../data.bin", 6), binary);
}

TEST_F(GuestFsTest, ReadOfALargeFileReturnsEveryByteInOrder) {
    // Many read chunks, an odd tail, and large enough for the huge-page path.
    std::string large((32u << 20) + 7, '\0');
    for (std::size_t i = 0; i < large.size(); ++i) {
        large[i] = static_cast<char>((i * 2654435761u) >> 13);
    }
    put(root / "large.bin", large);
    const auto back = fs_().read("/large.bin", large.size());
    ASSERT_EQ(back.size(), large.size());
    EXPECT_TRUE(back == large);
}

TEST_F(GuestFsTest, ReadRefusesAFinalLinkInsteadOfFollowingIt) {
    fs::create_symlink(outside / "secret.txt", root / "link");
    try {
        fs_().read("/link", 100);
        FAIL() << "a link was read";
    } catch (const FileError& e) {
        EXPECT_NE(std::string(e.what()).find("link"), std::string::npos);
    }
}

TEST_F(GuestFsTest, ReadNeverOpensAFifoASocketOrADevice) {
    ASSERT_EQ(::mkfifo((root / "fifo").c_str(), 0644), 0);
    ASSERT_EQ(::mknod((root / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
    const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const auto socket_path = (root / "sock").string();
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path.c_str());
    ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    const auto started = std::chrono::steady_clock::now();
    EXPECT_THROW(fs_().read("/fifo", 100), FileError);  // would block forever if opened O_RDONLY
    EXPECT_THROW(fs_().read("/null", 100), FileError);
    EXPECT_THROW(fs_().read("/sock", 100), FileError);
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
    // Nobody holds the FIFO open for reading: a non-blocking writer finds no reader.
    const int writer = ::open((root / "fifo").c_str(), O_WRONLY | O_NONBLOCK);
    EXPECT_EQ(writer, -1);
    EXPECT_EQ(errno, ENXIO);
    ::close(sock);
    EXPECT_EQ(fs_().stat("/fifo")->kind, EntryKind::other);
}

TEST_F(GuestFsTest, ReadOverTheCapIsRefusedNotTruncated) {
    put(root / "big", std::string(1000, 'x'));
    EXPECT_THROW(fs_().read("/big", 999), SandboxTransferCapExceeded);
    EXPECT_EQ(fs_().read("/big", 1000).size(), 1000u);
}

TEST_F(GuestFsTest, ReadOfADirectoryOrAMissingFileSaysSo) {
    fs::create_directories(root / "d");
    EXPECT_THROW(fs_().read("/d", 10), IsADirectory);
    EXPECT_THROW(fs_().read("/", 10), IsADirectory);
    EXPECT_THROW(fs_().read("/missing", 10), FileNotFound);
    EXPECT_THROW(fs_().read("/missing/deeper", 10), FileNotFound);
}

TEST_F(GuestFsTest, ReadPastItsDeadlineTimesOut) {
    put(root / "f", "x");
    EXPECT_THROW(fs_().read("/f", 10, std::chrono::steady_clock::now() - std::chrono::seconds(1)),
                 Timeout);
}

TEST_F(GuestFsTest, ListGivesSortedChildrenWithKindsSizesAndLinksAsLinks) {
    put(root / "d" / "b.txt", "bb");
    put(root / "d" / "a.txt", "a");
    fs::create_directories(root / "d" / "sub");
    fs::create_symlink(outside, root / "d" / "zlink");
    const auto entries = fs_().list("/d");
    ASSERT_EQ(entries.size(), 4u);
    EXPECT_EQ(entries[0], (GuestEntry{"a.txt", EntryKind::file, 1}));
    EXPECT_EQ(entries[1], (GuestEntry{"b.txt", EntryKind::file, 2}));
    EXPECT_EQ(entries[2], (GuestEntry{"sub", EntryKind::directory, std::nullopt}));
    EXPECT_EQ(entries[3], (GuestEntry{"zlink", EntryKind::symlink, std::nullopt}));
}

TEST_F(GuestFsTest, ListOfALinkOrMissingDirectoryIsRefused) {
    fs::create_symlink(outside / "dir", root / "link");
    EXPECT_THROW(fs_().list("/link"), ConfinementEscape);
    EXPECT_THROW(fs_().list("/missing"), FileNotFound);
}

TEST_F(GuestFsTest, WriteIsAtomicOwnedByTheGuestAndCreatesParents) {
    fs_().write("/w/x/y/file.txt", "first");
    fs_().write("/w/x/y/file.txt", "second", GuestWriteOptions{0600, true});
    EXPECT_EQ(slurp(root / "w/x/y/file.txt"), "second");
    struct stat st {};
    ASSERT_EQ(::stat((root / "w/x/y/file.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kOwner.uid);
    EXPECT_EQ(st.st_gid, kOwner.gid);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    for (const char* dir : {"w", "w/x", "w/x/y"}) {
        ASSERT_EQ(::stat((root / dir).c_str(), &st), 0);
        EXPECT_EQ(st.st_uid, kOwner.uid) << dir;
        EXPECT_EQ(st.st_mode & 07777, 0755u) << dir;
    }
    // No temporary sibling is left behind.
    EXPECT_EQ(std::distance(fs::directory_iterator(root / "w/x/y"), fs::directory_iterator{}), 1);
}

TEST_F(GuestFsTest, WriteRefusesAFinalLinkADirectoryAndTheRoot) {
    fs::create_symlink(outside / "secret.txt", root / "link");
    fs::create_directories(root / "dir");
    EXPECT_THROW(fs_().write("/link", "pwned"), ConfinementEscape);
    EXPECT_THROW(fs_().write("/dir", "x"), IsADirectory);
    EXPECT_THROW(fs_().write("/", "x"), InvalidArgument);
    EXPECT_EQ(slurp(outside / "secret.txt"), "SECRET");
}

TEST_F(GuestFsTest, WriteOverAHardLinkReplacesTheNameNotTheOutsideFile) {
    fs::create_hard_link(outside / "secret.txt", root / "hard");
    EXPECT_EQ(fs_().read("/hard", 100), "SECRET");  // same inode, inside the root: readable
    fs_().write("/hard", "replaced");
    EXPECT_EQ(slurp(root / "hard"), "replaced");
    EXPECT_EQ(slurp(outside / "secret.txt"), "SECRET");
    fs_().remove("/hard", false);
    EXPECT_EQ(slurp(outside / "secret.txt"), "SECRET");
}

TEST_F(GuestFsTest, MkdirsIsIdempotentAndOwnedByTheGuest) {
    fs_().mkdirs("/maf-sandbox/work");
    fs_().mkdirs("/maf-sandbox/work");
    struct stat st {};
    ASSERT_EQ(::stat((root / "maf-sandbox/work").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kOwner.uid);
    put(root / "file", "x");
    EXPECT_THROW(fs_().mkdirs("/file/sub"), NotADirectory);
}

TEST_F(GuestFsTest, RemoveOfAMissingPathSucceeds) {
    EXPECT_NO_THROW(fs_().remove("/missing", false));
    EXPECT_NO_THROW(fs_().remove("/missing/deeper", true));
}

TEST_F(GuestFsTest, RemoveUnlinksALinkAndNeverItsTarget) {
    fs::create_symlink(outside / "dir", root / "dirlink");
    fs::create_symlink(outside / "secret.txt", root / "filelink");
    fs_().remove("/dirlink", false);
    fs_().remove("/filelink", true);
    EXPECT_FALSE(fs::exists(fs::symlink_status(root / "dirlink")));
    EXPECT_FALSE(fs::exists(fs::symlink_status(root / "filelink")));
    EXPECT_TRUE(fs::exists(outside / "dir" / "canary"));
    EXPECT_TRUE(fs::exists(outside / "secret.txt"));
}

TEST_F(GuestFsTest, RemovingADirectoryNeedsRecursive) {
    fs::create_directories(root / "empty");
    EXPECT_THROW(fs_().remove("/empty", false), IsADirectory);
    EXPECT_TRUE(fs::exists(root / "empty"));
    fs_().remove("/empty", true);
    EXPECT_FALSE(fs::exists(root / "empty"));
    EXPECT_THROW(fs_().remove("/", true), InvalidArgument);
}

TEST_F(GuestFsTest, RecursiveRemovalNeverFollowsLinksAtAnyLevel) {
    put(root / "tree/a/b/file", "x");
    fs::create_symlink(outside / "dir", root / "tree/a/b/to_outside_dir");
    fs::create_symlink(outside / "secret.txt", root / "tree/a/to_secret");
    fs::create_hard_link(outside / "secret.txt", root / "tree/hard");
    fs_().remove("/tree", true);
    EXPECT_FALSE(fs::exists(root / "tree"));
    EXPECT_EQ(slurp(outside / "dir" / "canary"), "CANARY");
    EXPECT_EQ(slurp(outside / "secret.txt"), "SECRET");
}

TEST_F(GuestFsTest, PathsMustBeAbsoluteAndFreeOfNul) {
    EXPECT_THROW(fs_().stat("relative"), InvalidArgument);
    EXPECT_THROW(fs_().stat(std::string("/a\0b", 4)), ConfinementEscape);
    // `..` above the root stays at the root (RESOLVE_IN_ROOT semantics, after normalisation).
    put(root / "f", "inside");
    EXPECT_EQ(fs_().read("/../../f", 100), "inside");
}

// A directory inside the root is swapped for a link to the outside as fast as possible while
// every operation runs against it: nothing outside may ever be read, listed or deleted.
TEST_F(GuestFsTest, SwappingADirectoryForALinkMidOperationNeverEscapes) {
    put(root / "d" / "f", "inside");
    put(outside / "d" / "f", "SECRET");
    put(outside / "d" / "victim", "keep me");
    put(outside / "d" / "victim_dir" / "file", "keep me too");
    const auto d = root / "d";
    const auto parked = root / "d.parked";
    const auto link = root / "d.link";
    fs::create_symlink(outside / "d", link);
    std::atomic<bool> stop{false};
    std::thread swapper([&] {
        while (!stop.load()) {
            // d <-> link, each rename atomic, so /d is alternately the real directory and a link.
            ::rename(d.c_str(), parked.c_str());
            ::rename(link.c_str(), d.c_str());
            ::rename(d.c_str(), link.c_str());
            ::rename(parked.c_str(), d.c_str());
        }
    });
    int reads = 0;
    int escapes = 0;  // counted, not asserted, so the swapper thread is always joined
    for (int i = 0; i < 3000; ++i) {
        try {
            const auto content = fs_().read("/d/f", 100);
            escapes += content != "inside";
            ++reads;
        } catch (const ConfinementEscape&) {
        } catch (const FileError&) {
        }
        try {
            for (const auto& entry : fs_().list("/d")) {
                escapes += entry.name == "victim";
            }
        } catch (const ConfinementEscape&) {
        } catch (const FileError&) {
        }
        try {
            escapes += fs_().stat("/d/victim").has_value();
        } catch (const ConfinementEscape&) {
        }
        try {
            fs_().remove("/d/victim", false);
            fs_().remove("/d/victim_dir", true);
        } catch (const ConfinementEscape&) {
        }
        try {
            fs_().write("/d/written", "pwned");
            fs_().remove("/d/written", false);
        } catch (const ConfinementEscape&) {
        } catch (const FileError&) {
        }
    }
    stop = true;
    swapper.join();
    EXPECT_EQ(escapes, 0);
    EXPECT_FALSE(fs::exists(outside / "d" / "written"));
    EXPECT_EQ(slurp(outside / "d" / "f"), "SECRET");
    EXPECT_EQ(slurp(outside / "d" / "victim"), "keep me");
    EXPECT_EQ(slurp(outside / "d" / "victim_dir" / "file"), "keep me too");
    EXPECT_GT(reads, 0);  // the race was real: some reads went through the real directory
}

}  // namespace
}  // namespace maf_sandbox::runtime
