// The image store against archives built to exhaust the host, and against imports and removals
// that die half-way. An import is capped (bytes, entries, depth, a free-space floor) while it
// writes, and what a refused import wrote is gone; a leftover of a dead import or removal is
// swept by gc and by the next import or removal, and one an import still in progress holds is
// never swept; removing a tree takes a bounded number of descriptors however deep it is. Each
// case runs a benign control first, in the same store and under the same settings.
#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "maf_sandbox/runtime/host/gc.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "test_dirs.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace fs = std::filesystem;
using ::maf_sandbox::testing::TempDir;
using runtime::ImageImportLimitExceeded;
using runtime::ImageStore;
using runtime::ImportLimits;

// Writes a tar archive to a file as it goes (the bombs are far larger than memory should hold).
class StreamedTar {
  public:
    StreamedTar(const fs::path& path, bool gzip) {
        archive_write_set_format_pax_restricted(writer_);
        if (gzip) {
            archive_write_add_filter_gzip(writer_);
            archive_write_set_filter_option(writer_, "gzip", "compression-level", "1");
        }
        if (archive_write_open_filename(writer_, path.c_str()) != ARCHIVE_OK) {
            throw std::runtime_error(archive_error_string(writer_));
        }
    }
    ~StreamedTar() { archive_write_free(writer_); }

    StreamedTar& dir(const std::string& name) { return header(name, AE_IFDIR, 0755, 0); }
    // A regular file of `size` zero bytes, written in blocks.
    StreamedTar& zeros(const std::string& name, std::uint64_t size) {
        header(name, AE_IFREG, 0644, size);
        const std::vector<char> block(1 << 20, 0);
        for (std::uint64_t left = size; left > 0;) {
            const auto n = std::min<std::uint64_t>(left, block.size());
            archive_write_data(writer_, block.data(), n);
            left -= n;
        }
        return *this;
    }
    void close() { archive_write_close(writer_); }

  private:
    StreamedTar& header(const std::string& name, unsigned type, int mode, std::uint64_t size) {
        archive_entry* entry = archive_entry_new();
        archive_entry_set_pathname(entry, name.c_str());
        archive_entry_set_filetype(entry, type);
        archive_entry_set_perm(entry, mode);
        archive_entry_set_size(entry, static_cast<la_int64_t>(size));
        archive_write_header(writer_, entry);
        archive_entry_free(entry);
        return *this;
    }

    archive* writer_ = archive_write_new();
};

fs::path rootfs_with_zeros(const fs::path& path, std::uint64_t size) {
    StreamedTar tar(path, true);
    tar.dir("etc").dir("bin").zeros("zeros", size);
    tar.close();
    return path;
}

fs::path many_files(const fs::path& path, int count) {
    StreamedTar tar(path, true);
    tar.dir("etc").dir("f");
    for (int i = 0; i < count; ++i) {
        tar.zeros(fmt::format("f/{:06}", i), 0);
    }
    tar.close();
    return path;
}

// One directory chain `depth` components deep ("d/d/.../d"), a file at its bottom.
fs::path deep_tree(const fs::path& path, int depth) {
    StreamedTar tar(path, false);
    std::string name = "d";
    for (int i = 1; i < depth; ++i) {
        name += "/d";
    }
    tar.dir("etc").zeros(name + "/bottom", 16);
    tar.close();
    return path;
}

std::vector<std::string> leftovers(const ImageStore& store) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(store.images_dir())) {
        const auto name = entry.path().filename().string();
        if (name.starts_with(".import-") || name.starts_with(".remove-")) {
            names.push_back(name);
        }
    }
    return names;
}

bool listed(const ImageStore& store, const std::string& ref) {
    for (const auto& image : store.list()) {
        if (image.ref.str() == ref) {
            return true;
        }
    }
    return false;
}

// The refusal an import throws, or nullopt when it imported.
std::optional<ImageImportLimitExceeded> refusal(ImageStore& store, const fs::path& archive,
                                                const std::string& ref,
                                                const ImportLimits& limits) {
    try {
        store.import(archive, ref, limits);
        return std::nullopt;
    } catch (const ImageImportLimitExceeded& e) {
        return e;
    }
}

// A tmpfs of the test's own, unmounted (lazily) however the test ends.
class SmallDisk {
  public:
    SmallDisk(const fs::path& where, const std::string& options) : where_(where) {
        fs::create_directories(where_);
        if (::mount("tmpfs", where_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
            throw std::system_error(errno, std::generic_category(), "mounting a test tmpfs");
        }
    }
    // The mount already at `where` (one that moved with its directory), to unmount.
    static SmallDisk adopt(const fs::path& where) { return SmallDisk(where); }
    SmallDisk(SmallDisk&& other) noexcept : where_(std::exchange(other.where_, {})) {}
    SmallDisk& operator=(SmallDisk&&) = delete;
    ~SmallDisk() {
        if (!where_.empty()) {
            ::umount2(where_.c_str(), MNT_DETACH);
        }
    }
    const fs::path& path() const { return where_; }
    std::uint64_t free_bytes() const {
        struct statvfs st {};
        ::statvfs(where_.c_str(), &st);
        return static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
    }

  private:
    explicit SmallDisk(fs::path where) : where_(std::move(where)) {}
    fs::path where_;
};

// RLIMIT_NOFILE lowered for the scope, restored after.
class DescriptorLimit {
  public:
    explicit DescriptorLimit(rlim_t soft) {
        ::getrlimit(RLIMIT_NOFILE, &saved_);
        rlimit lowered = saved_;
        lowered.rlim_cur = soft;
        if (::setrlimit(RLIMIT_NOFILE, &lowered) != 0) {
            throw std::system_error(errno, std::generic_category(), "lowering RLIMIT_NOFILE");
        }
    }
    ~DescriptorLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }

  private:
    rlimit saved_{};
};

// Polls `done` until it holds or `within` passes.
bool eventually(const std::function<bool()>& done,
                std::chrono::milliseconds within = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
        if (done()) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
}

// A real import in a process of its own (a fork of this one), for killing or stopping it
// mid-unpack.
pid_t import_in_child(const fs::path& state, const fs::path& archive, const std::string& ref) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        try {
            ImageStore(state).import(archive, ref);
            ::_exit(0);
        } catch (...) {
            ::_exit(1);
        }
    }
    return pid;
}

// The staging directory of an import under way, once it has started writing entries.
std::optional<fs::path> unpacking(const ImageStore& store) {
    for (const auto& name : leftovers(store)) {
        std::error_code error;
        const auto files = store.images_dir() / name / "rootfs" / "f";
        if (fs::directory_iterator(files, error) != fs::directory_iterator() && !error) {
            return store.images_dir() / name;
        }
    }
    return std::nullopt;
}

runtime::GcReport gc(const fs::path& state) {
    runtime::Registry registry(state);
    runtime::GcOptions options;
    options.reclaim_stale_ids = false;  // the host-wide claim table is not this test's
    return runtime::reconcile(registry, options);
}

TEST(ImageStoreBounds, AZipBombIsRefusedBeforeItFillsTheStoreDisk) {
    TempDir dir{"maf-sec-bomb"};
    const SmallDisk disk(dir.path() / "disk", "size=64m");
    ImageStore store(disk.path() / "state");
    // Control: a small image on the same disk imports under the default caps.
    const auto small = rootfs_with_zeros(dir.path() / "small.tar.gz", 1 << 20);
    ASSERT_FALSE(refusal(store, small, "small:1", {}));
    ASSERT_TRUE(listed(store, "small:1"));

    // 256 MiB of zeros in a gzip of about a megabyte, onto a 64 MiB disk.
    const auto bomb = rootfs_with_zeros(dir.path() / "bomb.tar.gz", std::uint64_t{256} << 20);
    ASSERT_LT(fs::file_size(bomb), 4u << 20);
    const auto refused = refusal(store, bomb, "bomb:1", {});
    ASSERT_TRUE(refused) << "the bomb imported";
    EXPECT_EQ(refused->cap(), "free space");
    EXPECT_NE(std::string(refused->what()).find("--min-free-percent"), std::string::npos)
        << refused->what();
    // The disk was never filled, and what the import wrote is gone.
    EXPECT_TRUE(leftovers(store).empty());
    EXPECT_FALSE(listed(store, "bomb:1"));
    EXPECT_GT(disk.free_bytes(), std::uint64_t{48} << 20);
    EXPECT_TRUE(listed(store, "small:1"));
}

TEST(ImageStoreBounds, AnImportOverTheByteCapIsRefusedAtTheCap) {
    TempDir dir{"maf-sec-bytes"};
    ImageStore store(dir.path() / "state");
    ImportLimits limits;
    limits.max_bytes = 8 << 20;
    ASSERT_FALSE(
        refusal(store, rootfs_with_zeros(dir.path() / "ok.tar.gz", 4 << 20), "ok:1", limits));
    const auto refused =
        refusal(store, rootfs_with_zeros(dir.path() / "big.tar.gz", 64 << 20), "big:1", limits);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->cap(), "bytes");
    EXPECT_EQ(refused->limit(), limits.max_bytes);
    // Refused at the block that would pass the cap, not once the whole file was written.
    EXPECT_GT(refused->reached(), limits.max_bytes);
    EXPECT_LE(refused->reached(), limits.max_bytes + (4 << 20));
    const std::string message = refused->what();
    EXPECT_NE(message.find("--max-bytes"), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(limits.max_bytes)), std::string::npos) << message;
    EXPECT_TRUE(leftovers(store).empty());
    EXPECT_FALSE(listed(store, "big:1"));
}

TEST(ImageStoreBounds, AnArchiveOfTooManyEntriesIsRefused) {
    TempDir dir{"maf-sec-entries"};
    ImageStore store(dir.path() / "state");
    ImportLimits limits;
    limits.max_entries = 1000;
    ASSERT_FALSE(refusal(store, many_files(dir.path() / "ok.tar.gz", 500), "ok:1", limits));
    const auto refused =
        refusal(store, many_files(dir.path() / "many.tar.gz", 5000), "many:1", limits);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->cap(), "entries");
    EXPECT_EQ(refused->reached(), 1001u);
    EXPECT_NE(std::string(refused->what()).find("--max-entries"), std::string::npos);
    EXPECT_TRUE(leftovers(store).empty());
    EXPECT_FALSE(listed(store, "many:1"));
}

TEST(ImageStoreBounds, AnArchiveThatWouldUseUpTheDisksInodesIsRefused) {
    TempDir dir{"maf-sec-inodes"};
    const SmallDisk disk(dir.path() / "disk", "size=64m,nr_inodes=4000");
    ImageStore store(disk.path() / "state");
    // Under the default caps: only the free-inode floor stands in the way.
    ASSERT_FALSE(refusal(store, many_files(dir.path() / "ok.tar.gz", 500), "ok:1", {}));
    const auto refused = refusal(store, many_files(dir.path() / "many.tar.gz", 8000), "many:1", {});
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->cap(), "free space");
    EXPECT_TRUE(leftovers(store).empty());
    struct statvfs st {};
    ASSERT_EQ(::statvfs(disk.path().c_str(), &st), 0);
    EXPECT_GT(st.f_favail, 3000u);  // everything the refused import made is gone
}

TEST(ImageStoreBounds, AnEntryNestedPastTheDepthCapIsRefused) {
    TempDir dir{"maf-sec-depth"};
    ImageStore store(dir.path() / "state");
    ASSERT_FALSE(refusal(store, deep_tree(dir.path() / "ok.tar", 200), "ok:1", {}));
    const auto refused = refusal(store, deep_tree(dir.path() / "deep.tar", 300), "deep:1", {});
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->cap(), "depth");
    EXPECT_EQ(refused->limit(), ImportLimits{}.max_depth);
    EXPECT_NE(std::string(refused->what()).find("--max-depth"), std::string::npos);
    EXPECT_TRUE(leftovers(store).empty());
}

TEST(ImageStoreBounds, ADeepImageIsRemovedUnderALowDescriptorLimit) {
    TempDir dir{"maf-sec-deep-rm"};
    ImageStore store(dir.path() / "state");
    ImportLimits limits;
    limits.max_depth = 4096;
    ASSERT_FALSE(refusal(store, deep_tree(dir.path() / "shallow.tar", 20), "shallow:1", limits));
    ASSERT_FALSE(refusal(store, deep_tree(dir.path() / "deep.tar", 2000), "deep:1", limits));
    {
        // Far fewer descriptors than the tree has levels (the test's own take a dozen).
        const DescriptorLimit limit(64);
        store.remove("shallow:1");  // control
        store.remove("deep:1");
    }
    EXPECT_FALSE(listed(store, "shallow:1"));
    EXPECT_FALSE(listed(store, "deep:1"));
    EXPECT_TRUE(leftovers(store).empty());
    EXPECT_FALSE(fs::exists(store.images_dir() / "deep"));
}

TEST(ImageStoreBounds, AHalfDoneRemovalIsFinishedByTheNextSweep) {
    TempDir dir{"maf-sec-half-rm"};
    ImageStore store(dir.path() / "state");
    ASSERT_FALSE(refusal(store, deep_tree(dir.path() / "a.tar", 30), "a:1", {}));
    ASSERT_FALSE(refusal(store, deep_tree(dir.path() / "b.tar", 30), "b:1", {}));
    store.remove("a:1");  // control: a removal nothing stops
    ASSERT_TRUE(leftovers(store).empty());

    // A mount inside the image stops its removal half-way (removal never crosses a mount).
    const auto inside = fs::path("rootfs") / "d" / "d" / "d";
    std::optional<SmallDisk> blocker(std::in_place, store.images_dir() / "b" / "1" / inside,
                                     "size=1m");
    EXPECT_THROW(store.remove("b:1"), SystemError);
    EXPECT_FALSE(listed(store, "b:1"));
    const auto left = leftovers(store);
    ASSERT_EQ(left.size(), 1u);
    EXPECT_TRUE(left.front().starts_with(".remove-"));
    // The mount moved with the image; once it is gone, the next sweep can finish.
    blocker.emplace(SmallDisk::adopt(store.images_dir() / left.front() / inside));
    blocker.reset();
    const auto report = gc(dir.path() / "state");
    EXPECT_EQ(report.image_leftovers_removed, 1)
        << (report.errors.empty() ? "" : report.errors.front());
    EXPECT_TRUE(leftovers(store).empty());
}

TEST(ImageStoreBounds, AKilledImportIsSweptByGcAndByTheNextImport) {
    TempDir dir{"maf-sec-killed"};
    const auto state = dir.path() / "state";
    ImageStore store(state);
    const auto archive = many_files(dir.path() / "many.tar.gz", 40000);
    const auto small = rootfs_with_zeros(dir.path() / "small.tar.gz", 4096);
    // Control: gc on a store with nothing left over removes nothing.
    ASSERT_EQ(gc(state).image_leftovers_removed, 0);

    for (const bool by_gc : {true, false}) {
        SCOPED_TRACE(by_gc ? "swept by gc" : "swept by the next import");
        const pid_t child = import_in_child(state, archive, by_gc ? "killed:1" : "killed:2");
        ASSERT_GT(child, 0);
        std::optional<fs::path> staging;
        ASSERT_TRUE(eventually([&] { return (staging = unpacking(store)).has_value(); }));
        ::kill(child, SIGKILL);
        int status = 0;
        ASSERT_EQ(::waitpid(child, &status, 0), child);
        ASSERT_TRUE(WIFSIGNALED(status)) << "the import finished before it was killed";
        ASSERT_TRUE(fs::is_directory(*staging));
        if (by_gc) {
            EXPECT_EQ(gc(state).image_leftovers_removed, 1);
        } else {
            ASSERT_FALSE(refusal(store, small, "next:1", {}));
        }
        EXPECT_FALSE(fs::exists(*staging));
        EXPECT_TRUE(leftovers(store).empty());
    }
    EXPECT_TRUE(listed(store, "next:1"));
}

TEST(ImageStoreBounds, AnImportInProgressInAnotherProcessIsNotSwept) {
    TempDir dir{"maf-sec-busy"};
    const auto state = dir.path() / "state";
    ImageStore store(state);
    const auto archive = many_files(dir.path() / "many.tar.gz", 40000);
    const auto small = rootfs_with_zeros(dir.path() / "small.tar.gz", 4096);
    // Control: with nothing in progress, an import and gc run as usual.
    ASSERT_FALSE(refusal(store, small, "control:1", {}));
    ASSERT_EQ(gc(state).image_leftovers_removed, 0);

    const pid_t child = import_in_child(state, archive, "slow:1");
    ASSERT_GT(child, 0);
    std::optional<fs::path> staging;
    ASSERT_TRUE(eventually([&] { return (staging = unpacking(store)).has_value(); }));
    // Stopped mid-unpack, it holds its staging directory as a running import does.
    ::kill(child, SIGSTOP);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, WUNTRACED), child);
    ASSERT_TRUE(WIFSTOPPED(status)) << "the import finished before it was stopped";

    const auto report = gc(state);
    EXPECT_EQ(report.image_leftovers_removed, 0);
    ASSERT_FALSE(refusal(store, small, "meanwhile:1", {}));
    store.remove("meanwhile:1");
    EXPECT_TRUE(fs::is_directory(*staging));
    EXPECT_EQ(store.sweep().busy, 1);

    ::kill(child, SIGCONT);
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the import did not finish";
    EXPECT_TRUE(listed(store, "slow:1"));
    EXPECT_TRUE(leftovers(store).empty());
}

}  // namespace
}  // namespace maf_sandbox::runtime
