// The egress modes of the local runtime through LocalBackend: allowlist goes through the proxy
// process (outside the sandbox, unprivileged, gone with the sandbox), closed has no route and no
// proxy, unrestricted reaches a test host through slirp4netns or is refused, and warm reuse never
// changes a sandbox's policy. The only hosts reached are the tests' own (test_host.hpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <boost/json.hpp>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/host/gc.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "polling.hpp"
#include "process_probe.hpp"
#include "test_dirs.hpp"
#include "test_host.hpp"

namespace maf_sandbox::local {
namespace {

namespace fs = std::filesystem;
using egress_testing::TestHost;

// 0700 root (mkdtemp): the proxy must not need to traverse it.
using StateDir = ::maf_sandbox::testing::TempDir;
using ::maf_sandbox::testing::cgroup_processes;
using ::maf_sandbox::testing::comm_of;
using ::maf_sandbox::testing::find_process;
using ::maf_sandbox::testing::poll_until;
using ::maf_sandbox::testing::read_text;
using ::maf_sandbox::testing::status_field;

LocalBackendConfig config_for(const StateDir& state, const TestHost& host) {
    const fs::path hosts = state.path() / "egress-hosts";
    std::ofstream(hosts) << fmt::format("{} allowed.test denied.test\n", host.address());
    LocalBackendConfig config;
    config.state_dir = state.path();
    config.memory_bytes = 512ull << 20;
    config.egress_operator.hosts_file = hosts;
    config.egress_operator.allow_private = true;  // the test host lives on 10.219.0.0/16
    return config;
}

SandboxSpec spec_for(Egress egress, std::vector<std::string> allow = {}) {
    SandboxSpecFields fields;
    fields.kind = "shell";
    fields.egress = egress;
    fields.egress_allow = std::move(allow);
    return SandboxSpec(fields);
}

std::string sh(Sandbox& sandbox, const std::string& command) {
    ExecRequest request;
    request.command = command;
    request.timeout = Seconds(20);
    return run_blocking(sandbox.exec(request)).stdout_bytes;
}

runtime::SandboxRecord only_record(const StateDir& state) {
    runtime::Registry registry(state.path());
    const auto records = registry.list();
    if (records.size() != 1) {
        throw std::runtime_error(fmt::format("{} sandboxes, expected 1", records.size()));
    }
    return records.front();
}

// The sandbox's first recorded cgroup directory.
fs::path first_cgroup(const runtime::SandboxRecord& record) {
    return std::string(record.runtime.at("cgroup_paths").as_array().at(0).as_string());
}

// Waits until `pid` has ended (gone or a zombie awaiting its reaper).
bool ended_within(pid_t pid, std::chrono::milliseconds limit) {
    return poll_until([pid] { return !runtime::live_process_start_time(pid); }, limit,
                      std::chrono::milliseconds(20));
}

constexpr const char* kProxyComm = "maf-egress-prox";  // comm keeps 15 characters

TEST(EgressModes, AllowlistGuestGoesThroughTheProxyAndReachesOnlyAllowedHosts) {
    StateDir state;
    TestHost host;
    LocalBackend backend(config_for(state, host));
    const auto modes = backend.declarations().egress_modes;
    ASSERT_TRUE(modes.count(Egress::allowlist));
    auto sandbox = run_blocking(
        backend.acquire({"s", "t", "a", ""}, spec_for(Egress::allowlist, {"Allowed.TEST"})));

    const auto env = "\n" + sh(*sandbox, "env");
    for (const char* name : {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"}) {
        EXPECT_NE(env.find(fmt::format("\n{}=http://127.0.0.1:3128\n", name)), std::string::npos)
            << name << " in\n"
            << env;
    }
    EXPECT_NE(env.find("no_proxy=localhost,127.0.0.1\n"), std::string::npos) << env;
    EXPECT_NE(env.find("NO_PROXY=localhost,127.0.0.1\n"), std::string::npos) << env;

    EXPECT_EQ(sh(*sandbox, "curl -s -m 10 http://allowed.test/"), "test-host\n");
    EXPECT_EQ(sh(*sandbox, "curl -s -m 10 -o /dev/null -w '%{http_code}' http://denied.test/"),
              "403");
    EXPECT_EQ(sh(*sandbox, "curl -s -m 10 -o /dev/null -w '%{http_code}' http://allowed.test:81/"),
              "403");
    // Without the proxy there is no way out: no route to the test host at all.
    EXPECT_EQ(sh(*sandbox,
                 fmt::format("curl --noproxy '*' -s -m 5 http://{}/; echo rc=$?", host.address())),
              "rc=7\n");
    EXPECT_EQ(host.requests(), 1);

    const auto id = only_record(state).id;
    const auto decisions = backend.egress_decisions(id);
    const auto allowed = std::count_if(decisions.begin(), decisions.end(), [](const auto& d) {
        return d.allowed && d.host == "allowed.test" && d.port == 80 && d.method == "GET";
    });
    const auto denied = std::count_if(decisions.begin(), decisions.end(), [](const auto& d) {
        return !d.allowed && d.host == "denied.test" && !d.reason.empty();
    });
    EXPECT_EQ(allowed, 1);
    EXPECT_EQ(denied, 1);
    EXPECT_EQ(decisions.size(), 3u);
    EXPECT_THROW(backend.egress_decisions("0123456789abcdef0123456789abcdef"), InvalidArgument);

#ifdef MAF_SANDBOX_CLI
    const auto command = fmt::format("MAF_SANDBOX_STATE_DIR={} {} egress-log {} --json",
                                     state.path().string(), MAF_SANDBOX_CLI, id);
    FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string output;
    char chunk[4096];
    for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0;) {
        output.append(chunk, n);
    }
    EXPECT_EQ(::pclose(pipe), 0);
    const auto json = boost::json::parse(output).as_array();
    ASSERT_EQ(json.size(), 3u);
    EXPECT_EQ(json.at(0).at("host").as_string(), "allowed.test");
    EXPECT_TRUE(json.at(0).at("allowed").as_bool());
#endif
    EXPECT_FALSE(run_blocking(backend.dispose({"s", "t", "a", ""}, std::nullopt)));
}

TEST(EgressModes, ProxyRunsUnprivilegedOutsideTheSandboxFailsClosedAndGoesWithIt) {
    StateDir state;
    TestHost host;
    LocalBackend backend(config_for(state, host));
    const SandboxKey key{"s", "t", "a", ""};
    auto sandbox =
        run_blocking(backend.acquire(key, spec_for(Egress::allowlist, {"allowed.test"})));
    const auto record = only_record(state);
    const auto proxy = find_process(first_cgroup(record), kProxyComm);
    ASSERT_TRUE(proxy) << "no egress proxy in the sandbox's cgroup";

    for (const char* field : {"Uid", "Gid"}) {
        std::istringstream ids(status_field(*proxy, field));
        for (unsigned id; ids >> id;) {
            EXPECT_NE(id, 0u) << field;
        }
    }
    EXPECT_EQ(status_field(*proxy, "Groups"), "");
    EXPECT_EQ(status_field(*proxy, "CapEff"), "0000000000000000");
    EXPECT_EQ(status_field(*proxy, "CapPrm"), "0000000000000000");
    EXPECT_EQ(status_field(*proxy, "CapBnd"), "0000000000000000");
    EXPECT_EQ(status_field(*proxy, "NoNewPrivs"), "1");
    // In the host's network and PID namespaces: outside everything the guest can name.
    for (const char* ns : {"net", "pid"}) {
        EXPECT_EQ(fs::read_symlink(fmt::format("/proc/{}/ns/{}", *proxy, ns)),
                  fs::read_symlink(fmt::format("/proc/self/ns/{}", ns)))
            << ns;
    }
    // Its mount namespace is its own read-only copy of the host's, not the guest's.
    EXPECT_NE(fs::read_symlink(fmt::format("/proc/{}/ns/mnt", *proxy)),
              fs::read_symlink(fmt::format("/proc/{}/ns/mnt", record.supervisor.pid)));
    // It holds no descriptor of the supervisor's: no exec socket, no ready pipe of the launcher.
    int fds = 0;
    for (const auto& entry : fs::directory_iterator(fmt::format("/proc/{}/fd", *proxy))) {
        ++fds;
        const auto target = fs::read_symlink(entry.path()).string();
        EXPECT_EQ(target.find("exec.sock"), std::string::npos) << target;
    }
    EXPECT_LE(fds, 16);
    EXPECT_EQ(sh(*sandbox, "cat /proc/[0-9]*/comm | grep -c maf-egress"), "0\n");

    EXPECT_EQ(sh(*sandbox, "curl -s -m 10 http://allowed.test/"), "test-host\n");
    // A proxy that is down fails closed: the guest's connects are refused, nothing goes direct.
    ASSERT_EQ(::kill(*proxy, SIGKILL), 0);
    ASSERT_TRUE(ended_within(*proxy, std::chrono::seconds(5)));
    EXPECT_EQ(sh(*sandbox, "curl -s -m 5 http://allowed.test/; echo rc=$?"), "rc=7\n");
    EXPECT_EQ(host.requests(), 1);

    EXPECT_FALSE(run_blocking(backend.dispose(key, std::nullopt)));
}

// The "Max open files" soft and hard limits of `pid`, as /proc/<pid>/limits shows them.
std::string open_files_limits(pid_t pid) {
    std::istringstream limits(read_text(fmt::format("/proc/{}/limits", pid)));
    for (std::string line; std::getline(limits, line);) {
        if (line.starts_with("Max open files")) {
            std::istringstream fields(line.substr(std::string_view("Max open files").size()));
            std::string soft;
            std::string hard;
            fields >> soft >> hard;
            return soft + " " + hard;
        }
    }
    return {};
}

LocalBackendConfig with_proxy_nofile(LocalBackendConfig config, std::uint64_t nofile) {
    config.budgets = runtime::HostBudgets{};
    config.budgets->proxy_nofile = nofile;
    return config;
}

TEST(EgressModes, TheProxysDescriptorLimitIsItsPartOfTheSandboxsFileShare) {
    StateDir state;
    TestHost host;
    const auto config = with_proxy_nofile(config_for(state, host), 96);
    LocalBackend backend(config);
    const SandboxKey key{"s", "t", "a", ""};
    auto sandbox =
        run_blocking(backend.acquire(key, spec_for(Egress::allowlist, {"allowed.test"})));
    const auto proxy = find_process(first_cgroup(only_record(state)), kProxyComm);
    ASSERT_TRUE(proxy) << "no egress proxy in the sandbox's cgroup";
    const auto expected = runtime::sandbox_budgets(
        *config.budgets, config.pids, runtime::read_kernel_number("/proc/sys/fs/file-max"),
        runtime::read_kernel_number("/proc/sys/kernel/pid_max"), true);
    EXPECT_EQ(expected.proxy_nofile, 96u);
    EXPECT_EQ(open_files_limits(*proxy), "96 96");
    // The guest's processes divide what the proxy left of the share.
    EXPECT_EQ(sh(*sandbox, "ulimit -n"), fmt::format("{}\n", expected.nofile));
    EXPECT_EQ(sh(*sandbox, "curl -s -m 10 http://allowed.test/"), "test-host\n");
    EXPECT_FALSE(run_blocking(backend.dispose(key, std::nullopt)));
}

// The guest opens 40 connections to its proxy and holds them in the background; each is either
// closed by the proxy at once or held (no byte and no end within 2 s). Writes the count to
// flood.out in the guest's working directory.
constexpr const char* kFlood = R"(setsid bash -c '
fds=""; for i in $(seq 1 40); do exec {fd}<>/dev/tcp/127.0.0.1/3128 || break; fds="$fds $fd"; done
closed=0; held=0
for fd in $fds; do read -t 2 -u $fd x; rc=$?
  if [ $rc -gt 128 ]; then held=$((held+1)); else closed=$((closed+1)); fi; done
echo "closed=$closed held=$held" > flood.out; exec sleep 600' </dev/null >/dev/null 2>&1 &)";

TEST(EgressModes, AConnectionFloodPastTheProxysLimitIsRefusedCleanlyAndHarmsNoOtherSandbox) {
    StateDir state;
    TestHost host;
    LocalBackend flooded_backend(with_proxy_nofile(config_for(state, host), 96));
    LocalBackend other_backend(config_for(state, host));
    const SandboxKey flooded_key{"s", "flood", "a", ""};
    const SandboxKey other_key{"s", "other", "a", ""};
    auto flooded = run_blocking(
        flooded_backend.acquire(flooded_key, spec_for(Egress::allowlist, {"allowed.test"})));
    const auto flooded_record = only_record(state);
    auto other = run_blocking(
        other_backend.acquire(other_key, spec_for(Egress::allowlist, {"allowed.test"})));

    sh(*flooded, kFlood);
    std::string counts;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (counts.empty() && std::chrono::steady_clock::now() < deadline) {
        counts = sh(*flooded, "cat flood.out 2>/dev/null");
        if (counts.empty()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    const auto sessions = runtime::egress_sessions_within(96);
    // Exactly as many sessions as fit are held; the rest were closed on accept, none left hanging.
    EXPECT_EQ(counts, fmt::format("closed={} held={}\n", 40 - sessions, sessions));

    // While the flood holds every session of its proxy: that proxy refuses a new connection
    // cleanly and stays up, and the other sandbox's proxy serves as before.
    const auto before = host.requests();
    EXPECT_EQ(sh(*other, "curl -s -m 10 http://allowed.test/"), "test-host\n");
    EXPECT_NE(sh(*flooded, "curl -s -m 10 http://allowed.test/; echo rc=$?"), "test-host\nrc=0\n");
    EXPECT_TRUE(find_process(first_cgroup(flooded_record), kProxyComm));
    EXPECT_EQ(host.requests(), before + 1);

    // The flood ends: the flooded sandbox's proxy serves again.
    sh(*flooded, "pkill -x sleep; true");
    std::string served;
    const auto again = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (served != "test-host\n" && std::chrono::steady_clock::now() < again) {
        served = sh(*flooded, "curl -s -m 5 http://allowed.test/");
    }
    EXPECT_EQ(served, "test-host\n");
    EXPECT_FALSE(run_blocking(flooded_backend.dispose(flooded_key, std::nullopt)));
    EXPECT_FALSE(run_blocking(other_backend.dispose(other_key, std::nullopt)));
}

TEST(EgressModes, ProxyEndsWithItsSandboxAndGcLeavesNoProcess) {
    StateDir state;
    TestHost host;
    LocalBackend backend(config_for(state, host));
    run_blocking(
        backend.acquire({"s", "t", "a", ""}, spec_for(Egress::allowlist, {"allowed.test"})));
    const auto record = only_record(state);
    const auto proxy = find_process(first_cgroup(record), kProxyComm);
    ASSERT_TRUE(proxy);
    // The sandbox's PID 1 dies (as on its idle timeout, or a crash): the proxy follows by itself.
    ASSERT_EQ(::kill(record.supervisor.pid, SIGKILL), 0);
    EXPECT_TRUE(ended_within(*proxy, std::chrono::seconds(5)));
    ASSERT_TRUE(ended_within(record.supervisor.pid, std::chrono::seconds(5)));

    runtime::Registry registry(state.path());
    const auto report = runtime::reconcile(registry);
    EXPECT_EQ(report.reclaimed, 1);
    EXPECT_EQ(report.failed, 0) << fmt::format("{}", fmt::join(report.errors, "; "));
    EXPECT_TRUE(registry.list().empty());
    for (const auto& path : record.runtime.at("cgroup_paths").as_array()) {
        EXPECT_FALSE(fs::exists(std::string(path.as_string())));
    }
}

TEST(EgressModes, WarmAcquireWithAnotherPolicyConflictsAndKeepsTheFirstSandbox) {
    StateDir state;
    TestHost host;
    LocalBackend backend(config_for(state, host));
    const SandboxKey key{"s", "t", "a", ""};
    auto first =
        run_blocking(backend.acquire(key, spec_for(Egress::allowlist, {"b.test", "allowed.test"})));
    sh(*first, "echo kept > marker");
    const auto id = only_record(state).id;

    // The same set in another order and case is the same policy: warm reuse.
    auto again = run_blocking(
        backend.acquire(key, spec_for(Egress::allowlist, {"ALLOWED.test", "b.test", "b.test"})));
    EXPECT_EQ(sh(*again, "cat marker"), "kept\n");

    try {
        run_blocking(backend.acquire(key, spec_for(Egress::closed)));
        ADD_FAILURE() << "no EgressPolicyConflict for closed over allowlist";
    } catch (const EgressPolicyConflict& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("allowlist"), std::string::npos) << message;
        EXPECT_NE(message.find("closed"), std::string::npos) << message;
    }
    EXPECT_THROW(run_blocking(backend.acquire(key, spec_for(Egress::allowlist, {"b.test"}))),
                 EgressPolicyConflict);

    const auto records = runtime::Registry(state.path()).list();
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records.front().id, id);
    EXPECT_EQ(records.front().egress, Egress::allowlist);
    EXPECT_EQ(records.front().egress_allow, (std::vector<std::string>{"allowed.test", "b.test"}));
    EXPECT_EQ(sh(*first, "cat marker"), "kept\n");
    EXPECT_EQ(sh(*first, "curl -s -m 10 http://allowed.test/"), "test-host\n");
    // Disposing takes the proxy with the sandbox.
    const auto proxy = find_process(first_cgroup(records.front()), kProxyComm);
    ASSERT_TRUE(proxy);
    EXPECT_EQ(run_blocking(backend.dispose_scope("s", "t")).disposed, 1);
    EXPECT_TRUE(ended_within(*proxy, std::chrono::seconds(5)));
}

TEST(EgressModes, ClosedHasNoRouteNoProxyAndNoProxyEnvironment) {
    StateDir state;
    TestHost host;
    LocalBackend backend(config_for(state, host));
    auto sandbox = run_blocking(backend.acquire({"s", "t", "a", ""}, spec_for(Egress::closed)));
    EXPECT_EQ(sh(*sandbox, "env | grep -ci proxy"), "0\n");
    EXPECT_EQ(sh(*sandbox, "wc -l < /proc/net/route; tail -n +3 /proc/net/dev | cut -d: -f1"),
              "1\n    lo\n");
    EXPECT_EQ(sh(*sandbox, fmt::format("curl -s -m 5 http://{}/; echo rc=$?", host.address())),
              "rc=7\n");
    EXPECT_EQ(sh(*sandbox, "curl -s -m 5 http://127.0.0.1:3128/; echo rc=$?"), "rc=7\n");
    const auto record = only_record(state);
    for (const pid_t pid : cgroup_processes(first_cgroup(record))) {
        EXPECT_NE(comm_of(pid), kProxyComm);
        EXPECT_NE(comm_of(pid), "slirp4netns");
    }
    EXPECT_FALSE(fs::exists(runtime::egress_log_path(state.path() / "sandboxes" / record.id)));
    EXPECT_TRUE(backend.egress_decisions(record.id).empty());
    EXPECT_EQ(host.requests(), 0);
    run_blocking(backend.dispose_scope("s", "t"));
}

TEST(EgressModes, BadAllowlistOrUnreadableHostsFileCreatesNothing) {
    StateDir state;
    LocalBackendConfig config;
    config.state_dir = state.path();
    config.memory_bytes = 512ull << 20;
    {
        LocalBackend backend(config);
        EXPECT_THROW(run_blocking(backend.acquire({"s", "t", "a", ""},
                                                  spec_for(Egress::allowlist, {"http://x.test/"}))),
                     InvalidArgument);
        EXPECT_TRUE(backend.list({}).empty());
    }
    config.egress_operator.hosts_file = state.path() / "no-such-hosts-file";
    LocalBackend backend(config);
    try {
        run_blocking(
            backend.acquire({"s", "t", "a", ""}, spec_for(Egress::allowlist, {"allowed.test"})));
        ADD_FAILURE() << "a missing hosts file was accepted";
    } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("MAF_SANDBOX_EGRESS_HOSTS_FILE"), std::string::npos)
            << e.what();
    }
    EXPECT_TRUE(backend.list({}).empty());
    EXPECT_TRUE(runtime::Registry(state.path()).list().empty());
}

TEST(EgressModes, UnrestrictedReachesTheTestHostOrIsRefusedClearly) {
    StateDir state;
    TestHost host;
    LocalBackend backend(config_for(state, host));
    const auto modes = backend.declarations().egress_modes;
    const bool declared = modes.count(Egress::unrestricted) > 0;
    EXPECT_EQ(declared, runtime::egress_unavailable_reason(Egress::unrestricted).empty());
    const SandboxKey key{"s", "t", "a", ""};
    if (!declared) {
        try {
            run_blocking(backend.acquire(key, spec_for(Egress::unrestricted)));
            ADD_FAILURE() << "unrestricted was not refused";
        } catch (const SandboxEgressNotEnforced& e) {
            EXPECT_NE(std::string(e.what()).find("unrestricted"), std::string::npos);
        }
        EXPECT_TRUE(backend.list({}).empty());
        return;
    }
    auto sandbox = run_blocking(backend.acquire(key, spec_for(Egress::unrestricted)));
    EXPECT_EQ(sh(*sandbox, "env | grep -ci proxy"), "0\n");
    EXPECT_EQ(sh(*sandbox, fmt::format("curl -s -m 10 http://{}/", host.address())), "test-host\n");
    EXPECT_EQ(host.requests(), 1);
    const auto slirp = find_process(first_cgroup(only_record(state)), "slirp4netns");
    ASSERT_TRUE(slirp) << "no slirp4netns in the sandbox's cgroup";
    EXPECT_FALSE(run_blocking(backend.dispose(key, std::nullopt)));
    EXPECT_TRUE(ended_within(*slirp, std::chrono::seconds(5)));
}

}  // namespace
}  // namespace maf_sandbox::local
