#include "maf_sandbox/runtime/host/gc.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "maf_sandbox/core/errors.hpp"
#include "temp_dir.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

pid_t reaped_child() {
    const pid_t child = ::fork();
    if (child == 0) {
        ::_exit(0);
    }
    ::waitpid(child, nullptr, 0);
    return child;
}

SandboxRecord record_with(SupervisorRef supervisor) {
    SandboxRecord record;
    record.id = Registry::new_id();
    record.image = "host:latest";
    record.supervisor = supervisor;
    record.state = SandboxState::running;
    record.created_at = Clock::now() - std::chrono::hours(1);
    return record;
}

SupervisorRef self() {
    return SupervisorRef{::getpid(), *process_start_time(::getpid())};
}
SupervisorRef dead() {
    return SupervisorRef{reaped_child(), 12345};
}

TEST(GcTest, ADeadSandboxLosesItsDirectoryAndRecordAndALiveOneIsKept) {
    TempDir temp;
    Registry registry(temp.path());
    const auto gone = record_with(dead());
    const auto live = record_with(self());
    registry.create(gone);
    registry.create(live);
    std::ofstream(registry.sandbox_dir(gone.id) / "upper-file") << "x";
    fs::create_directories(registry.sandbox_dir(gone.id) / "upper/dir");
    std::vector<std::string> cleaned;
    GcOptions options;
    options.cleanup = [&](const SandboxRecord& record) { cleaned.push_back(record.id); };
    const auto report = reconcile(registry, options);
    EXPECT_EQ(report.examined, 2);
    EXPECT_EQ(report.alive, 1);
    EXPECT_EQ(report.reclaimed, 1);
    EXPECT_EQ(report.failed, 0);
    EXPECT_EQ(cleaned, std::vector<std::string>{gone.id});
    EXPECT_FALSE(fs::exists(registry.sandbox_dir(gone.id)));
    EXPECT_TRUE(registry.get(live.id));
}

TEST(GcTest, AFailingCleanupKeepsTheRecordForTheNextRun) {
    TempDir temp;
    Registry registry(temp.path());
    const auto gone = record_with(dead());
    registry.create(gone);
    GcOptions options;
    options.cleanup = [](const SandboxRecord&) { throw Error("cgroup still busy"); };
    const auto report = reconcile(registry, options);
    EXPECT_EQ(report.failed, 1);
    ASSERT_EQ(report.errors.size(), 1u);
    EXPECT_NE(report.errors[0].find("cgroup still busy"), std::string::npos);
    EXPECT_TRUE(registry.get(gone.id));
}

TEST(GcTest, TwoStateDirectoriesNeverDisturbEachOther) {
    TempDir first_dir;
    TempDir second_dir;
    Registry first(first_dir.path());
    Registry second(second_dir.path());
    const auto a = record_with(dead());
    const auto b = record_with(dead());
    first.create(a);
    second.create(b);
    EXPECT_EQ(reconcile(first).reclaimed, 1);
    EXPECT_FALSE(first.get(a.id));
    EXPECT_TRUE(second.get(b.id));
}

TEST(GcTest, ACreateInProgressIsKeptWithinItsGrace) {
    TempDir temp;
    Registry registry(temp.path());
    auto creating = record_with(SupervisorRef{});
    creating.created_at = Clock::now();
    creating.state = SandboxState::creating;
    registry.create(creating);
    EXPECT_EQ(reconcile(registry).reclaimed, 0);
    EXPECT_TRUE(registry.get(creating.id));
    GcOptions no_grace;
    no_grace.creating_grace = std::chrono::seconds(0);
    EXPECT_EQ(reconcile(registry, no_grace).reclaimed, 1);
}

TEST(GcTest, AnOrphanDirectoryWithoutARecordIsRemoved) {
    TempDir temp;
    Registry registry(temp.path());
    const auto orphan = Registry::new_id();
    fs::create_directories(registry.sandbox_dir(orphan) / "upper");
    fs::create_directories(temp.path() / "sandboxes" / "not-a-sandbox");
    GcOptions options;
    options.creating_grace = std::chrono::seconds(0);
    const auto report = reconcile(registry, options);
    EXPECT_EQ(report.orphan_dirs_removed, 1);
    EXPECT_FALSE(fs::exists(registry.sandbox_dir(orphan)));
    EXPECT_TRUE(fs::exists(temp.path() / "sandboxes" / "not-a-sandbox"));
}

// A creator killed after it started the supervisor but before it wrote the record leaves a
// directory without a record and a live process in cgroups named after the id: gc kills it
// before it removes the directory, instead of leaving it running without one.
TEST(GcTest, AnOrphanDirectorysProcessesInItsNamedCgroupsAreKilledFirst) {
    const fs::path pids_root = "/sys/fs/cgroup/pids";
    const fs::path unified_root = "/sys/fs/cgroup";
    fs::path root;
    if (fs::exists(pids_root / "cgroup.procs")) {
        root = pids_root;
    } else if (fs::exists(unified_root / "cgroup.subtree_control")) {
        root = unified_root;
    } else {
        GTEST_SKIP() << "no writable pids or unified cgroup hierarchy here";
    }
    TempDir temp;
    Registry registry(temp.path());
    const auto orphan = Registry::new_id();
    fs::create_directories(registry.sandbox_dir(orphan));
    const auto cgroup = root / ("maf-sbx-" + orphan);
    ASSERT_TRUE(fs::create_directory(cgroup));
    const pid_t child = ::fork();
    if (child == 0) {
        std::ofstream(cgroup / "cgroup.procs") << 0 << std::flush;
        ::pause();
        ::_exit(0);
    }
    for (int i = 0; i < 200; ++i) {
        std::ifstream procs(cgroup / "cgroup.procs");
        pid_t member = 0;
        if (procs >> member) {
            break;
        }
        ::usleep(5 * 1000);
    }
    GcOptions options;
    options.creating_grace = std::chrono::seconds(0);
    const auto report = reconcile(registry, options);
    EXPECT_EQ(report.orphan_dirs_removed, 1) << (report.errors.empty() ? "" : report.errors[0]);
    int status = 0;
    pid_t waited = 0;
    for (int i = 0; i < 400 && waited == 0; ++i) {
        waited = ::waitpid(child, &status, WNOHANG);
        ::usleep(5 * 1000);
    }
    if (waited == 0) {
        ::kill(child, SIGKILL);  // gc left it running: end it here, and fail
        ::waitpid(child, nullptr, 0);
        ::rmdir(cgroup.c_str());
        FAIL() << "gc left the orphan's process running";
    }
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    EXPECT_FALSE(fs::exists(cgroup));
    EXPECT_FALSE(fs::exists(registry.sandbox_dir(orphan)));
}

TEST(GcTest, DefaultCleanupRemovesTheSandboxesOwnRecordedCgroupsAndNothingElse) {
    TempDir temp;
    Registry registry(temp.path());
    auto gone = record_with(dead());
    const auto not_a_cgroup = temp.path() / "precious";
    fs::create_directories(not_a_cgroup);
    boost::json::array paths{not_a_cgroup.string()};
    std::optional<fs::path> cgroup;
    std::optional<fs::path> foreign;  // a cgroup, but not this sandbox's
    for (const char* controller : {"/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified"}) {
        if (fs::exists(fs::path(controller) / "cgroup.procs")) {
            cgroup = fs::path(controller) / ("maf-sbx-" + gone.id);
            foreign = fs::path(controller) / ("maf-gc-test-" + gone.id.substr(0, 8));
            fs::create_directory(*cgroup);
            fs::create_directory(*foreign);
            paths.emplace_back(cgroup->string());
            paths.emplace_back(foreign->string());
            break;
        }
    }
    gone.runtime["cgroup_paths"] = paths;
    registry.create(gone);
    const auto report = reconcile(registry);
    EXPECT_EQ(report.reclaimed, 1) << (report.errors.empty() ? "" : report.errors[0]);
    EXPECT_TRUE(fs::exists(not_a_cgroup));
    if (cgroup) {
        EXPECT_FALSE(fs::exists(*cgroup));
        EXPECT_TRUE(fs::exists(*foreign));
        ::rmdir(foreign->c_str());
    }
}

}  // namespace
}  // namespace maf_sandbox::runtime
