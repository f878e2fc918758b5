// A state directory is trusted, its records are not.
// Another host user who owns or can write the local runtime's state directory could forge a
// record naming any pid, cgroup and directory, which root's purge and gc then acted on. Now such
// a directory is refused before any record in it is read; and a record in a directory that is
// ours is still untrusted input: only the sandbox's own pid (in its own maf-sbx cgroup), its own
// cgroups and its own directory are ever killed or removed. Victims are the test's own: a process
// in a cgroup it made, an empty cgroup it made, and a root-owned 0700 directory. Each case first
// checks the benign state (a root-owned 0700 state directory, one an earlier version made).
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "forgery_victims.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/local/warm_lookup.hpp"
#include "maf_sandbox/runtime/host/gc.hpp"
#include "maf_sandbox/runtime/host/recorded_handle.hpp"
#include "maf_sandbox/runtime/wire/id_claims.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "security_fixture.hpp"

namespace maf_sandbox::security {
namespace {

using forgery::as_nobody;
using forgery::TmpName;
using forgery::Victims;
using runtime::Registry;

constexpr const char* kForgedId = "cccccccccccccccccccccccccccccccc";

mode_t mode_of(const fs::path& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

// A record as the runtime writes one, naming the victims as its sandbox's pid, cgroups and
// directory; `claims` is the id table it names (one of the test's own).
std::string forged_record(const std::string& id, const Victims& victims, pid_t pid,
                          std::uint64_t start_time, const fs::path& claims) {
    return fmt::format(
        R"({{"version":1,"host_ids":{{"base":2000000000,"count":65536,"claims_dir":"{claims}"}},)"
        R"("id":"{id}","labels":{{"agent":"cli","kind":"shell","scope":"forged","thread":"t"}},)"
        R"("image":"host:latest","egress":"closed","egress_allow":[],)"
        R"("limits":{{"memory_bytes":1073741824,"pids":512,"cpus":1,"disk_bytes":2147483648}},)"
        R"("runtime":{{"cgroup_paths":["{busy}","{empty}"],"cgroup_layout":"{layout}",)"
        R"("sandbox_dir":"{dir}","socket":"{dir}/exec.sock","guest_host_uid":2000001000,)"
        R"("guest_host_gid":2000001000,"sandbox_id":"{id}","id_base":2000000000,"id_count":65536,)"
        R"("id_claims_dir":"{claims}","work_dir":"/maf-sandbox/work",)"
        R"("egress_policy":{{"mode":"closed","allow":[]}}}},)"
        R"("supervisor":{{"pid":{pid},"start_time":{start}}},"created_at_ms":1,)"
        R"("last_used_at_ms":1,"lifecycle":{{"idle_timeout_s":3600,"max_lifetime_s":86400}},)"
        R"("state":"running"}})",
        fmt::arg("claims", claims.string()), fmt::arg("id", id),
        fmt::arg("busy", victims.busy_cgroup().string()),
        fmt::arg("empty", victims.empty_cgroup().string()),
        fmt::arg("layout", forgery::layout_name()), fmt::arg("dir", victims.dir().string()),
        fmt::arg("pid", pid), fmt::arg("start", start_time));
}

// As `nobody`: a world-writable state directory in /tmp with a forged record in it.
void forge_state_as_nobody(const fs::path& state, const std::string& record) {
    ASSERT_TRUE(as_nobody([&] {
        const auto dir = state / "sandboxes" / kForgedId;
        return ::mkdir(state.c_str(), 0777) == 0 &&
               ::mkdir((state / "sandboxes").c_str(), 0777) == 0 &&
               ::mkdir(dir.c_str(), 0777) == 0 && forgery::write_text(dir / "record.json", record);
    }));
}

std::string error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const std::exception& e) {
        return e.what();
    }
    return {};
}

TEST(StateDirTrust, RootOwnedPrivateStateDirWorksAndEarlierLayoutStillLoads) {
    TempDir temp("maf-sec-state");
    const fs::path state = temp.path() / "state";
    // An earlier version's layout: the root made by create_directories under umask 022, the
    // rest by make_state_dir, and a record of a sandbox that has ended.
    fs::create_directories(state / "sandboxes" / kForgedId);
    fs::create_directories(state / "locks");
    ::chmod(state.c_str(), 0755);
    ::chmod((state / "sandboxes").c_str(), 0711);
    ::chmod((state / "locks").c_str(), 0700);
    Victims victims;
    spit(state / "sandboxes" / kForgedId / "record.json",
         forged_record(kForgedId, victims, 0, 0, temp.path() / "ids"));
    Registry registry(state);
    const auto record = registry.get(kForgedId);
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->labels.at("scope"), "forged");
    EXPECT_EQ(mode_of(state), 0700u) << "a looser mode of our own directory is tightened";
    EXPECT_EQ(mode_of(state / "sandboxes"), 0700u);
    // A new private directory works too, and a sticky /tmp on the way is no objection.
    TempDir fresh("maf-sec-state");
    EXPECT_NO_THROW(Registry{fresh.path()});
    EXPECT_NO_THROW(runtime::IdClaims{fresh.path() / "ids"});
}

TEST(StateDirTrust, StateDirAnotherUserOwnsIsRefusedAndItsForgedRecordNeverActedOn) {
    Victims victims;
    TmpName evil("maf-sec-evil-local");
    forge_state_as_nobody(evil.path(), forged_record(kForgedId, victims, victims.pid(),
                                                     victims.start_time(), evil.path() / "ids"));

    const auto refusal = error_of([&] { Registry registry(evil.path()); });
    EXPECT_NE(refusal.find("owned by uid 65534"), std::string::npos) << refusal;
    EXPECT_NE(refusal.find("owned by root with mode 0700"), std::string::npos) << refusal;
    const auto claims_refusal = error_of([&] { runtime::IdClaims claims(evil.path()); });
    EXPECT_NE(claims_refusal.find("owned by uid 65534"), std::string::npos) << claims_refusal;
#ifdef MAF_SANDBOX_CLI
    // Root's CLI, as an operator pointed at the directory would run it.
    for (const std::string args : {"purge --scope forged --thread t", "gc"}) {
        const auto result = forgery::run_command(
            fmt::format("MAF_SANDBOX_STATE_DIR={} timeout 60 {} {}",
                        shell_quote(evil.path().string()), MAF_SANDBOX_CLI, args));
        EXPECT_NE(result.status, 0) << args << ": " << result.output;
        EXPECT_NE(result.output.find("owned by uid 65534"), std::string::npos)
            << args << ": " << result.output;
    }
#endif
    EXPECT_TRUE(victims.process_alive());
    EXPECT_TRUE(victims.cgroups_kept());
    EXPECT_TRUE(victims.dir_kept());
}

TEST(StateDirTrust, LinkedOrWorldWritableStateDirIsRefused) {
    TempDir temp("maf-sec-state");
    const fs::path real = temp.path() / "real";
    fs::create_directory(real);
    ::chmod(real.c_str(), 0700);
    EXPECT_NO_THROW(Registry{real});  // benign: the directory itself
    fs::create_directory_symlink(real, temp.path() / "link");
    try {
        Registry registry(temp.path() / "link");
        ADD_FAILURE() << "a state directory that is a link was accepted";
    } catch (const SystemError& e) {
        EXPECT_EQ(e.error_number(), ELOOP) << e.what();
    }
    // A root-owned link on the way is followed (and where it leads checked).
    EXPECT_NO_THROW(Registry{temp.path() / "link" / "below"});

    // A link on the way that another user owns (in sticky /tmp) is not followed.
    TmpName user_link("maf-sec-evil-link");
    ASSERT_TRUE(as_nobody([&] { return ::symlink(real.c_str(), user_link.path().c_str()) == 0; }));
    const auto refusal = error_of([&] { Registry registry(user_link.path() / "below"); });
    EXPECT_NE(refusal.find("owned by uid 65534"), std::string::npos) << refusal;

    const fs::path open_dir = temp.path() / "open";
    fs::create_directory(open_dir);
    ::chmod(open_dir.c_str(), 0777);
    const auto writable = error_of([&] { Registry registry(open_dir); });
    EXPECT_NE(writable.find("other users can write it"), std::string::npos) << writable;
}

TEST(StateDirTrust, ForgedRecordInOwnStateDirActsOnlyOnTheSandboxesOwnObjects) {
    TempDir temp("maf-sec-state");
    Registry registry(temp.path() / "state");  // benign: root-owned, private
    Victims victims;
    // A damaged (or root-forged) record in our own directory: its supervisor is the victim
    // process, its cgroups and directory the victims'.
    const auto dir = registry.sandbox_dir(kForgedId);
    ASSERT_EQ(::mkdir(dir.c_str(), 0711), 0);
    spit(dir / "record.json", forged_record(kForgedId, victims, victims.pid(), victims.start_time(),
                                            temp.path() / "ids"));
    const auto record = registry.get(kForgedId);
    ASSERT_TRUE(record.has_value());

    EXPECT_FALSE(local::handle_of(*record).has_value()) << "a handle naming foreign objects";
    EXPECT_FALSE(local::kill_recorded(*record));  // the lean CLI's kill
    EXPECT_TRUE(victims.process_alive());
    const auto failure = local::destroy_recorded(registry, *record);  // purge's
    EXPECT_FALSE(failure.has_value()) << *failure;
    EXPECT_FALSE(registry.get(kForgedId).has_value()) << "the forged record itself is removed";
    EXPECT_TRUE(victims.all_intact());

    // gc's cleanup of a dead record removes only cgroups named for the sandbox.
    const std::string dead_id = "dddddddddddddddddddddddddddddddd";
    ASSERT_EQ(::mkdir(registry.sandbox_dir(dead_id).c_str(), 0711), 0);
    spit(registry.sandbox_dir(dead_id) / "record.json",
         forged_record(dead_id, victims, 0, 0, temp.path() / "ids"));
    runtime::GcOptions options;
    options.reclaim_stale_ids = false;
    const auto report = runtime::reconcile(registry, options);
    EXPECT_EQ(report.reclaimed, 1) << (report.errors.empty() ? "" : report.errors.front());
    EXPECT_TRUE(victims.all_intact());

    // destroy_sandbox itself refuses a handle whose cgroups are not the sandbox's.
    runtime::SandboxHandle handle;
    handle.pid = victims.pid();
    handle.start_time = victims.start_time();
    handle.sandbox_id = kForgedId;
    handle.sandbox_dir = victims.dir();
    handle.cgroup_layout =
        forgery::layout_name() == "v2" ? runtime::CgroupLayout::v2 : runtime::CgroupLayout::v1;
    handle.cgroups = {victims.busy_cgroup()};
    EXPECT_THROW(runtime::destroy_sandbox(handle), InvalidArgument);
    EXPECT_TRUE(victims.all_intact());
}

TEST(StateDirTrust, RecordedHandleCheckAcceptsOnlyTheSandboxesOwnNames) {
    const fs::path root = "/var/lib/maf-sandbox/sandboxes";
    runtime::SandboxHandle own;
    own.sandbox_id = kForgedId;
    own.sandbox_dir = root / kForgedId;
    own.socket = own.sandbox_dir / "exec.sock";
    own.cgroups = {fs::path("/sys/fs/cgroup/pids/user.slice") /
                   fmt::format("maf-sbx-{}", kForgedId)};
    EXPECT_NO_THROW(runtime::check_recorded_handle(own, root, kForgedId));

    auto other_dir = own;
    other_dir.sandbox_dir = "/root/precious";
    EXPECT_THROW(runtime::check_recorded_handle(other_dir, root), InvalidArgument);
    auto other_socket = own;
    other_socket.socket = "/run/docker.sock";
    EXPECT_THROW(runtime::check_recorded_handle(other_socket, root), InvalidArgument);
    auto other_cgroup = own;
    other_cgroup.cgroups = {"/sys/fs/cgroup/pids/system.slice"};
    EXPECT_THROW(runtime::check_recorded_handle(other_cgroup, root), InvalidArgument);
    auto climbing = own;
    climbing.cgroups = {fs::path("/sys/fs/cgroup/pids/../../../tmp") /
                        fmt::format("maf-sbx-{}", kForgedId)};
    EXPECT_THROW(runtime::check_recorded_handle(climbing, root), InvalidArgument);
    EXPECT_THROW(runtime::check_recorded_handle(own, root, "dddddddddddddddddddddddddddddddd"),
                 InvalidArgument);
}

}  // namespace
}  // namespace maf_sandbox::security
