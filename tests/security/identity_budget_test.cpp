// Every sandbox is its own host identity, and no sandbox can spend the host's shared budgets
// (issue 17, items 2 and 3; docs/SECURITY.md, "Identities and budgets").
//
// Identity: two sandboxes hold disjoint host id ranges from the host-wide claim table, run as
// different host uids, and each user namespace is owned by its sandbox's own uid, not host root;
// the registry records the range and gc reclaims it once the sandbox is gone, however it died.
// Budgets: one sandbox spends each per-user kernel budget (inotify instances and watches,
// fanotify groups, queued signals, POSIX message queues; user namespaces are refused outright)
// until the kernel refuses it more, and while it holds them host root, an unprivileged host user
// and a second sandbox still get the same object; a file-table flood at the defaults stays within
// the documented share of fs.file-max; a create past the pid budget is refused with a typed error.
// Each case checks the benign path first.
#include <fcntl.h>
#include <grp.h>
#include <linux/nsfs.h>
#include <mqueue.h>
#include <signal.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include <fmt/ranges.h>

#include "maf_sandbox/runtime/host/gc.hpp"
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/wire/id_claims.hpp"
#include "security_fixture.hpp"

#ifndef MAF_SECURITY_BUDGET_PROBE
#error "the build passes the budget probe's path as MAF_SECURITY_BUDGET_PROBE"
#endif

namespace maf_sandbox::security {
namespace {

using namespace std::chrono_literals;

constexpr const char* kBudget = "/maf-sandbox/work/.budget";
// An unprivileged host uid no account, image or sandbox uses (below the id pool, above 2^16).
constexpr uid_t kHostUser = 0x5EED0000;

void install_budget_probe(Box& box) {
    api_write(box, kBudget, slurp(MAF_SECURITY_BUDGET_PROBE));
    ASSERT_EQ(box.sh(fmt::format("chmod 0755 {}", kBudget)).exit_code, 0);
}

struct Made {
    long count = -1;
    int error = -1;
};

Made parse_made(const std::string& line) {
    Made made;
    if (std::sscanf(line.c_str(), "made %ld errno %d", &made.count, &made.error) != 2) {
        ADD_FAILURE() << "the budget probe reported no result: " << line;
    }
    return made;
}

// Runs the probe in the foreground (for a second sandbox's single object).
Made run_once(Box& box, const std::string& op, const std::string& dir = "") {
    const auto result = box.exec(Argv{kBudget, op, "1", "0", dir.empty() ? "/tmp" : dir});
    return parse_made(result.stdout_bytes);
}

// Starts the probe in the background, spending `op` until refused and then holding what it got,
// and returns its result once it has it.
Made spend_and_hold(Box& box, const std::string& op, const std::string& dir = "") {
    const auto started =
        box.sh(fmt::format("rm -f {0}-release {0}.out; {0} {1} 100000000 90 {2} > {0}.out 2>&1 "
                           "< /dev/null &",
                           kBudget, op, dir));
    EXPECT_EQ(started.exit_code, 0) << started.stderr_bytes;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
        // Through the file plane, not exec: a flood of processes leaves none to run `cat`.
        std::string out;
        try {
            out = api_read(box, std::string(kBudget) + ".out");
        } catch (const std::exception&) {
        }
        last = out;
        const auto at = out.find("made ");
        if (at != std::string::npos && out.find('\n', at) != std::string::npos) {
            return parse_made(out.substr(at));
        }
        std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "the budget probe never reported: " << last;
    return {};
}

void release(Box& box) {
    api_write(box, std::string(kBudget) + "-release", "");
}

// Runs `attempt` in a forked child of this process, as host root or, with `uid`, as that
// unprivileged host uid, and says whether it succeeded. The child makes system calls only.
bool host_can(const std::function<bool()>& attempt, std::optional<uid_t> uid = std::nullopt) {
    const pid_t child = ::fork();
    if (child == 0) {
        if (uid && (::setgroups(0, nullptr) != 0 || ::setresgid(*uid, *uid, *uid) != 0 ||
                    ::setresuid(*uid, *uid, *uid) != 0)) {
            ::_exit(2);
        }
        ::_exit(attempt() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool make_inotify() {
    return ::inotify_init1(IN_CLOEXEC) >= 0;
}
bool make_inotify_watch() {
    const int fd = ::inotify_init1(IN_CLOEXEC);
    return fd >= 0 && ::inotify_add_watch(fd, "/", IN_MODIFY) >= 0;
}
bool make_fanotify() {
    return ::fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_FID | FAN_CLOEXEC, O_RDONLY) >= 0;
}
bool queue_signal() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN);
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
    siginfo_t info{};
    info.si_signo = SIGRTMIN;
    info.si_code = SI_QUEUE;
    info.si_pid = ::getpid();
    info.si_uid = ::getuid();
    return ::syscall(SYS_rt_sigqueueinfo, ::getpid(), SIGRTMIN, &info) == 0;
}
bool make_message_queue() {
    char name[64];
    std::snprintf(name, sizeof name, "/maf-idtest-%d", ::getpid());
    mq_attr attr{};
    attr.mq_maxmsg = 10;
    attr.mq_msgsize = 8192;
    const mqd_t queue = ::mq_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600, &attr);
    if (queue == static_cast<mqd_t>(-1)) {
        return false;
    }
    ::mq_unlink(name);
    return true;
}

// Host root, an unprivileged host user and a second sandbox each still get one `op` object.
void others_keep_their_own(const std::function<bool()>& attempt, const std::string& op,
                           const std::string& dir = "") {
    EXPECT_TRUE(host_can(attempt)) << "host root could not make a " << op << " object";
    EXPECT_TRUE(host_can(attempt, kHostUser))
        << "an unprivileged host user could not make a " << op << " object";
    Box second;
    install_budget_probe(second);
    const auto made = run_once(second, op, dir);
    EXPECT_EQ(made.count, 1) << "a second sandbox could not make a " << op << " object (errno "
                             << made.error << ")";
}

// The benign control of every class: before anything is spent, all three get the object.
void everyone_can(const std::function<bool()>& attempt, const std::string& op,
                  const std::string& dir = "") {
    ASSERT_TRUE(host_can(attempt)) << op;
    ASSERT_TRUE(host_can(attempt, kHostUser)) << op;
    Box box;
    install_budget_probe(box);
    ASSERT_EQ(run_once(box, op, dir).count, 1) << op;
}

runtime::SandboxRecord only_record(const Box& box) {
    runtime::Registry registry(box.state());
    const auto records = registry.list();
    if (records.size() != 1) {
        throw std::runtime_error("expected exactly one sandbox in the state directory");
    }
    return records[0];
}

// The host uid of a process (the real uid of /proc/<pid>/status), or -1.
long host_uid_of(pid_t pid) {
    std::ifstream status(fmt::format("/proc/{}/status", pid));
    std::string line;
    while (std::getline(status, line)) {
        if (line.starts_with("Uid:")) {
            return std::stol(line.substr(4));
        }
    }
    return -1;
}

// Host pids of the processes named `comm` in the PID namespace of `pid1`.
std::vector<pid_t> processes_in(pid_t pid1, const std::string& comm) {
    std::vector<pid_t> found;
    std::error_code ec;
    const auto ns = fs::read_symlink(fmt::format("/proc/{}/ns/pid", pid1), ec);
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
        const auto name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) {
            continue;
        }
        std::error_code ignored;
        if (fs::read_symlink(entry.path() / "ns/pid", ignored) != ns || ignored) {
            continue;
        }
        auto text = slurp(entry.path() / "comm");
        if (!text.empty() && text.back() == '\n') {
            text.pop_back();
        }
        if (text == comm) {
            found.push_back(static_cast<pid_t>(std::stol(name)));
        }
    }
    return found;
}

// --- Identity -----------------------------------------------------------------------------------

TEST(SandboxIdentity, TwoSandboxesHoldDisjointRangesAndRunAsDifferentHostUids) {
    Box first;
    Box second;
    const auto a = first.handle();
    const auto b = second.handle();
    // Benign: each sandbox runs, and its PID 1 is its own guest root's host uid.
    EXPECT_EQ(host_uid_of(a.pid), static_cast<long>(a.ids.to_host(0)));
    EXPECT_EQ(host_uid_of(b.pid), static_cast<long>(b.ids.to_host(0)));
    EXPECT_TRUE(a.ids.host_base + a.ids.span() <= b.ids.host_base ||
                b.ids.host_base + b.ids.span() <= a.ids.host_base)
        << a.ids.host_base << " and " << b.ids.host_base << " overlap";
    EXPECT_GE(a.ids.host_base, 0x70000000u);  // the documented pool, not the old shared range
    EXPECT_GE(b.ids.host_base, 0x70000000u);
    for (Box* box : {&first, &second}) {
        ASSERT_EQ(box->sh("sleep 30 > /dev/null 2>&1 < /dev/null &").exit_code, 0);
    }
    std::this_thread::sleep_for(200ms);
    const auto guests_a = processes_in(a.pid, "sleep");
    const auto guests_b = processes_in(b.pid, "sleep");
    ASSERT_FALSE(guests_a.empty());
    ASSERT_FALSE(guests_b.empty());
    EXPECT_EQ(host_uid_of(guests_a[0]), static_cast<long>(a.guest_host_uid));
    EXPECT_EQ(host_uid_of(guests_b[0]), static_cast<long>(b.guest_host_uid));
    EXPECT_NE(a.guest_host_uid, b.guest_host_uid);
    EXPECT_GE(a.guest_host_uid, a.ids.host_base);
    EXPECT_LT(a.guest_host_uid, a.ids.host_base + a.ids.count);
    // The services' ids follow the guest's and no guest id maps to them.
    EXPECT_EQ(a.ids.proxy_id(), a.ids.host_base + a.ids.count);
    const auto map = first.sh("cat /proc/self/uid_map").stdout_bytes;
    EXPECT_EQ(map.substr(map.find_first_not_of(' ')),
              fmt::format("0 {:10} {:10}\n", a.ids.host_base, a.ids.count))
        << map;
}

TEST(SandboxIdentity, TheUserNamespaceIsOwnedByTheSandboxsOwnUidNotHostRoot) {
    Box box;
    const auto handle = box.handle();
    const runtime::UniqueFd ns(
        ::open(fmt::format("/proc/{}/ns/user", handle.pid).c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(ns);
    uid_t owner = 12345;
    ASSERT_EQ(::ioctl(ns.get(), NS_GET_OWNER_UID, &owner), 0) << std::strerror(errno);
    EXPECT_NE(owner, 0u);
    EXPECT_EQ(owner, handle.ids.to_host(0));
    // The namespace's own limits were set by its root before it dropped its capabilities, and
    // the guest cannot change them.
    EXPECT_EQ(box.sh("cat /proc/sys/user/max_inotify_instances").stdout_bytes, "128\n");
    EXPECT_NE(box.sh("echo 100000 > /proc/sys/user/max_inotify_instances").exit_code, 0);
    EXPECT_EQ(box.sh("cat /proc/sys/user/max_inotify_instances").stdout_bytes, "128\n");
    // The guest's own limits.
    const auto limit = [&](const std::string& name) {
        return box
            .sh(fmt::format("grep '^Max {}' /proc/self/limits | awk '{{print $(NF-1)}}'", name))
            .stdout_bytes;
    };
    EXPECT_EQ(limit("pending signals"), "4096\n");
    EXPECT_EQ(limit("msgqueue size"), "819200\n");
}

// A guest's core dump would go to the host's core_pattern (possibly a helper running as host root,
// storing it outside the sandbox's disk limit): the hard limit is 0 and the guest cannot raise it.
TEST(SandboxBudgets, TheGuestCannotDumpCore) {
    Box box;
    EXPECT_EQ(
        box.sh("grep '^Max core file size' /proc/self/limits | awk '{print $5, $6}'").stdout_bytes,
        "0 0\n");
    // Control: lowering a limit the guest owns works, so the refusal below is about raising it.
    EXPECT_EQ(box.sh("ulimit -S -n 100 && echo lowered").stdout_bytes, "lowered\n");
    EXPECT_NE(box.sh("ulimit -c unlimited").exit_code, 0);
    EXPECT_NE(box.sh("ulimit -H -c 1024").exit_code, 0);
}

TEST(SandboxIdentity, TheRegistryRecordsTheRangeAndTheClaimTableHoldsIt) {
    Box box;
    const auto record = only_record(box);
    const auto handle = box.handle();
    ASSERT_TRUE(record.host_ids);
    EXPECT_EQ(record.host_ids->base, handle.ids.host_base);
    EXPECT_EQ(record.host_ids->count, handle.ids.count);
    EXPECT_EQ(record.host_ids->claims_dir, runtime::default_id_claims_dir());
    // Read back through JSON, as every other process sees it.
    EXPECT_EQ(runtime::record_from_json(runtime::to_json(record)).host_ids, record.host_ids);
    bool held = false;
    for (const auto& claim : runtime::IdClaims().list()) {
        if (claim.sandbox_id == record.id) {
            held = claim.live && claim.range.first == handle.ids.host_base &&
                   claim.range.count == handle.ids.span();
        }
    }
    EXPECT_TRUE(held) << "no live claim of sandbox " << record.id;
}

TEST(SandboxIdentity, GcReclaimsTheRangeOfASandboxWhoseSupervisorWasKilled) {
    Box box;
    const auto record = only_record(box);
    const auto claimed = [&] {
        for (const auto& claim : runtime::IdClaims().list()) {
            if (claim.sandbox_id == record.id) {
                return true;
            }
        }
        return false;
    };
    // Benign: gc keeps a live sandbox and its claim.
    runtime::Registry registry(box.state());
    auto report = runtime::reconcile(registry);
    EXPECT_EQ(report.reclaimed, 0);
    ASSERT_TRUE(claimed());
    ASSERT_EQ(::kill(record.supervisor.pid, SIGKILL), 0);
    for (int i = 0; i < 200 && runtime::Registry::is_alive(record); ++i) {
        std::this_thread::sleep_for(10ms);
    }
    ASSERT_FALSE(runtime::Registry::is_alive(record));
    EXPECT_TRUE(claimed()) << "nothing but gc or a disposal releases a claim";
    report = runtime::reconcile(registry);
    EXPECT_EQ(report.reclaimed, 1) << fmt::format("{}", fmt::join(report.errors, "; "));
    EXPECT_FALSE(claimed());
}

// --- Budgets ------------------------------------------------------------------------------------

TEST(SandboxBudgets, InotifyInstancesOfOneSandboxLeaveEveryoneElseTheirOwn) {
    everyone_can(make_inotify, "inotify");
    Box box;
    install_budget_probe(box);
    const auto spent = spend_and_hold(box, "inotify");
    EXPECT_GT(spent.count, 0);
    EXPECT_LE(spent.count, 128);
    EXPECT_EQ(spent.error, EMFILE);
    others_keep_their_own(make_inotify, "inotify");
    release(box);
}

TEST(SandboxBudgets, InotifyWatchesOfOneSandboxLeaveEveryoneElseTheirOwn) {
    everyone_can(make_inotify_watch, "inotify-watches", "/tmp/w");
    Box box;
    install_budget_probe(box);
    const auto spent = spend_and_hold(box, "inotify-watches", "/maf-sandbox/work/w");
    EXPECT_GT(spent.count, 1000);
    EXPECT_LE(spent.count, 65536);
    EXPECT_EQ(spent.error, ENOSPC);
    others_keep_their_own(make_inotify_watch, "inotify-watches", "/tmp/w");
    release(box);
}

TEST(SandboxBudgets, FanotifyGroupsOfOneSandboxLeaveEveryoneElseTheirOwn) {
    Box box;
    install_budget_probe(box);
    const auto one = run_once(box, "fanotify");
    if (one.count == 0) {
        GTEST_SKIP() << "unprivileged fanotify is refused here (errno " << one.error << ")";
    }
    everyone_can(make_fanotify, "fanotify");
    const auto spent = spend_and_hold(box, "fanotify");
    EXPECT_GT(spent.count, 0);
    EXPECT_LE(spent.count, 16);
    EXPECT_EQ(spent.error, EMFILE);
    others_keep_their_own(make_fanotify, "fanotify");
    release(box);
}

TEST(SandboxBudgets, QueuedSignalsOfOneSandboxLeaveEveryoneElseTheirOwn) {
    everyone_can(queue_signal, "sigqueue");
    Box box;
    install_budget_probe(box);
    const auto spent = spend_and_hold(box, "sigqueue");
    EXPECT_GT(spent.count, 0);
    EXPECT_LE(spent.count, 4096);
    EXPECT_EQ(spent.error, EAGAIN);
    others_keep_their_own(queue_signal, "sigqueue");
    release(box);
}

TEST(SandboxBudgets, MessageQueuesOfOneSandboxLeaveEveryoneElseTheirOwn) {
    everyone_can(make_message_queue, "mqueue");
    Box box;
    install_budget_probe(box);
    const auto spent = spend_and_hold(box, "mqueue");
    EXPECT_GT(spent.count, 0);
    EXPECT_LE(spent.count * 10 * 8192, 819200);  // RLIMIT_MSGQUEUE bounds the whole sandbox
    EXPECT_EQ(spent.error, EMFILE);
    others_keep_their_own(make_message_queue, "mqueue");
    release(box);
}

TEST(SandboxBudgets, AGuestCannotCreateUserNamespaces) {
    Box box;
    install_budget_probe(box);
    const auto made = run_once(box, "userns");
    EXPECT_EQ(made.count, 0);
    EXPECT_EQ(made.error, EPERM);
    EXPECT_EQ(box.sh("cat /proc/sys/user/max_user_namespaces").stdout_bytes, "16\n");
}

TEST(SandboxBudgets, AFileTableFloodAtTheDefaultsStaysWithinItsShareOfFileMax) {
    const auto file_max = runtime::read_kernel_number("/proc/sys/fs/file-max");
    const runtime::HostBudgets defaults;
    const std::uint64_t share = file_max / 100 * defaults.file_share_percent;
    const auto in_use = [] {
        std::uint64_t allocated = 0;
        std::ifstream("/proc/sys/fs/file-nr") >> allocated;
        return allocated;
    };
    Box box;  // the defaults: 512 processes
    install_budget_probe(box);
    // Benign: a guest opens files as usual.
    EXPECT_EQ(box.sh("exec 3</dev/null 4</dev/null && echo ok").stdout_bytes, "ok\n");
    const auto nofile = std::stoull(box.sh("ulimit -n").stdout_bytes);
    EXPECT_LE(nofile * local::LocalBackendConfig{}.pids, share);
    const auto before = in_use();
    std::atomic<bool> done{false};
    std::atomic<std::uint64_t> peak{before};
    std::thread sampler([&] {
        while (!done) {
            peak = std::max<std::uint64_t>(peak, in_use());
            std::this_thread::sleep_for(20ms);
        }
    });
    struct Join {
        std::atomic<bool>& done;
        std::thread& thread;
        ~Join() {
            done = true;
            if (thread.joinable()) {
                thread.join();
            }
        }
    } join{done, sampler};
    const auto spent = spend_and_hold(box, "files");
    std::this_thread::sleep_for(300ms);  // held: sampled while every worker keeps its files
    // Meanwhile an unprivileged host process and a new sandbox still open files.
    EXPECT_TRUE(host_can([] { return ::open("/dev/null", O_RDONLY) >= 0; }, kHostUser));
    try {
        Box second;
        EXPECT_EQ(second.sh("exec 3</dev/null && echo ok").stdout_bytes, "ok\n");
    } catch (const std::exception& e) {
        ADD_FAILURE() << "a second sandbox could not start during the flood: " << e.what();
    }
    done = true;
    sampler.join();
    release(box);
    EXPECT_GT(static_cast<std::uint64_t>(spent.count), share / 2) << "the flood never got going";
    EXPECT_LE(static_cast<std::uint64_t>(spent.count), share);
    // The host's other activity (other tests) moves file-nr too: a margin of 20,000 files.
    EXPECT_LE(peak - before, share + 20000)
        << "the sandbox held " << peak - before << " files of fs.file-max " << file_max;
    std::printf("[ files ] held %ld (%.1f%% of fs.file-max %llu), nofile %llu\n", spent.count,
                100.0 * static_cast<double>(spent.count) / static_cast<double>(file_max),
                static_cast<unsigned long long>(file_max), static_cast<unsigned long long>(nofile));
}

TEST(SandboxBudgets, ACreatePastThePidBudgetIsRefusedWithATypedError) {
    // Benign: at the defaults a sandbox is admitted.
    { Box admitted; }
    // A share of kernel.pid_max too small for one sandbox's 512 pids (the host's own setting is
    // never touched).
    local::LocalBackendConfig tight;
    tight.budgets = runtime::HostBudgets{};
    tight.budgets->pid_share_percent = 1;
    const auto budget = runtime::pid_budget(
        *tight.budgets, runtime::read_kernel_number("/proc/sys/kernel/pid_max"));
    ASSERT_LT(budget, tight.pids);
    EXPECT_THROW(Box refused(tight), SandboxCapacityExceeded);
}

TEST(SandboxBudgets, LiveSandboxesTimesTheirPidsMustFitThePidBudget) {
    // A private claim table and pool, so other sandboxes on the host do not move the count.
    TempDir table("maf-sec-ids");
    local::LocalBackendConfig config;
    config.id_claims_dir = table.path() / "ids";
    config.id_pool = runtime::IdPool::parse("0x60000000:0x100000");
    config.budgets = runtime::HostBudgets{};
    config.budgets->pid_share_percent = 1;
    const auto budget = runtime::pid_budget(
        *config.budgets, runtime::read_kernel_number("/proc/sys/kernel/pid_max"));
    config.pids = budget / 3;  // three fit, a fourth does not
    auto first = std::make_unique<Box>(config);
    Box second(config);
    Box third(config);
    EXPECT_THROW(Box fourth(config), SandboxCapacityExceeded);
    first.reset();  // disposing of one makes room again
    EXPECT_NO_THROW(Box fourth(config));
}

}  // namespace
}  // namespace maf_sandbox::security
