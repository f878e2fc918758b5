// Nothing outlives its owner, for the MCP server (issue 17, item 6): a server records itself as
// an owner of every sandbox it uses, including one it reuses by key from an earlier process
// (here, one a process without an owner made), so a SIGKILLed server, on stdio or HTTP, takes it
// along within seconds. Two servers sharing a key are co-owners: the sandbox stays while either
// runs. Each case first checks the benign state: while a server runs, its sandbox runs and the
// record names the server.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "maf_sandbox/runtime/host/gc.hpp"
#include "maf_sandbox/runtime/wire/owner.hpp"
#include "security_fixture.hpp"

namespace maf_sandbox::security {
namespace {

using namespace std::chrono_literals;
using runtime::Registry;
using runtime::SandboxRecord;

#ifdef MAF_SANDBOX_CLI
std::string full_cli() {
    return (fs::path(MAF_SANDBOX_CLI).parent_path() / "maf-sandbox-cli").string();
}

constexpr const char* kScope = "maf-sandbox-mcp";  // the server's default scope and agent
constexpr const char* kAgent = "mcp";

struct ServerProcess {
    pid_t pid = -1;
    int input = -1;    // stdio: the server's stdin
    int output = -1;   // stdio: the server's stdout
    std::string seen;  // what it wrote that no output_shows has consumed yet
};

void end(ServerProcess& server) {
    if (server.pid > 0) {
        ::kill(server.pid, SIGKILL);
        int status = 0;
        ::waitpid(server.pid, &status, 0);
        server.pid = -1;
    }
    for (int* fd : {&server.input, &server.output}) {
        if (*fd >= 0) {
            ::close(*fd);
            *fd = -1;
        }
    }
}

// `maf-sandbox-cli mcp --floor container <extra...>` with the test's state directory; stdin and
// stdout on pipes.
ServerProcess start_server(const fs::path& state, const std::vector<std::string>& extra) {
    int in[2];
    int out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
        return {};
    }
    const std::string cli = full_cli();
    std::vector<std::string> args{cli, "mcp", "--floor", "container"};
    args.insert(args.end(), extra.begin(), extra.end());
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::setenv("MAF_SANDBOX_STATE_DIR", state.c_str(), 1);
        ::setenv("MAF_SANDBOX_MCP_TOKEN", "test-token", 1);
        const int null = ::open("/dev/null", O_RDWR);
        ::dup2(in[0], 0);
        ::dup2(out[1], 1);
        ::dup2(null, 2);
        std::vector<char*> argv;
        for (auto& arg : args) {
            argv.push_back(arg.data());
        }
        argv.push_back(nullptr);
        ::execv(cli.c_str(), argv.data());
        ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    return {pid, in[1], out[0], {}};
}

std::string initialize_requests() {
    return R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})"
           "\n"
           R"({"jsonrpc":"2.0","method":"notifications/initialized"})"
           "\n";
}

std::string call_request(int id, const std::string& command) {
    return fmt::format(
        R"({{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"run_shell","arguments":{{"command":"{}"}}}}}})"
        "\n",
        id, command);
}

bool send(const ServerProcess& server, const std::string& text) {
    return ::write(server.input, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

// Reads the server's output until it shows `needle` or `within` passed.
bool output_shows(ServerProcess& server, const std::string& needle, std::chrono::seconds within) {
    std::string& seen = server.seen;
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
        if (const auto at = seen.find(needle); at != std::string::npos) {
            seen.erase(0, at + needle.size());
            return true;
        }
        pollfd ready{server.output, POLLIN, 0};
        if (::poll(&ready, 1, 200) == 1) {
            char chunk[4096];
            const auto n = ::read(server.output, chunk, sizeof chunk);
            if (n <= 0) {
                return false;
            }
            seen.append(chunk, static_cast<std::size_t>(n));
        }
    }
    return false;
}

// Runs `command` through the HTTP server on `port` as an MCP client would (initialize, then one
// tools/call), retrying the initialize until the server listens; returns curl's output.
std::string call_over_http(int port, const std::string& command) {
    const std::string script = fmt::format(
        R"(U=http://127.0.0.1:{0}/mcp; H=(-H "Authorization: Bearer test-token" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
for i in $(seq 1 150); do
  SID=$(curl -s -D - "${{H[@]}}" -d '{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-03-26","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}' $U | grep -i '^mcp-session-id' | cut -d' ' -f2 | tr -d '\r')
  [ -n "$SID" ] && break; sleep 0.2
done
curl -s "${{H[@]}}" -H "Mcp-Session-Id: $SID" -d '{{"jsonrpc":"2.0","method":"notifications/initialized"}}' $U >/dev/null
curl -s -m 60 "${{H[@]}}" -H "Mcp-Session-Id: $SID" -d '{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"run_shell","arguments":{{"command":"{1}"}}}}}}' $U)",
        port, command);
    FILE* pipe = ::popen(fmt::format("bash -c {}", shell_quote(script)).c_str(), "r");
    if (pipe == nullptr) {
        return {};
    }
    std::string out;
    char chunk[4096];
    for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0;) {
        out.append(chunk, n);
    }
    ::pclose(pipe);
    return out;
}

// A sandbox under the MCP server's key for `thread`, made by this test process, which names no
// owner: what an earlier front end leaves for a server to reuse.
SandboxRecord unowned_sandbox_for(const fs::path& state, const std::string& thread) {
    local::LocalBackendConfig config;
    config.state_dir = state;
    local::LocalBackend backend(config);
    SandboxSpecFields fields;
    fields.kind = "shell";
    run_blocking(backend.acquire(SandboxKey{kScope, thread, kAgent, ""}, SandboxSpec(fields)));
    const auto records = Registry(state).list();
    if (records.size() != 1) {
        throw std::runtime_error(fmt::format("{} sandboxes, expected 1", records.size()));
    }
    return records.front();
}

bool names_owner(const SandboxRecord& record, pid_t pid) {
    const auto owners = runtime::recorded_owners(record);
    return std::any_of(owners.begin(), owners.end(),
                       [&](const runtime::SandboxOwner& owner) { return owner.pid == pid; });
}

// True when the record, its supervisor and its cgroups are all gone.
bool gone(const fs::path& state, const SandboxRecord& record) {
    if (Registry(state).get(record.id) || Registry::is_alive(record)) {
        return false;
    }
    std::error_code ec;
    for (const auto& path : record.runtime.at("cgroup_paths").as_array()) {
        if (fs::exists(std::string(path.as_string()), ec)) {
            return false;
        }
    }
    return true;
}

bool gone_within(const fs::path& state, const SandboxRecord& record, std::chrono::seconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
        if (gone(state, record)) {
            return true;
        }
        std::this_thread::sleep_for(50ms);
    }
    return gone(state, record);
}

// The benign half for a server that reused `earlier`: it is the same sandbox (no new one), it
// names the server as an owner, and gc leaves it alone while the server runs.
void expect_reused_and_owned(const fs::path& state, const SandboxRecord& earlier, pid_t server) {
    const auto records = Registry(state).list();
    ASSERT_EQ(records.size(), 1u) << "the server made a sandbox of its own instead of reusing";
    ASSERT_EQ(records.front().id, earlier.id);
    EXPECT_TRUE(names_owner(records.front(), server));
    Registry registry(state);
    const auto report = runtime::reconcile(registry);
    EXPECT_EQ(report.reclaimed, 0) << fmt::format("{}", fmt::join(report.errors, "; "));
    EXPECT_TRUE(Registry::is_alive(earlier));
}

TEST(McpOwner, AKilledStdioServerTakesTheSandboxItReusedByKeyWithIt) {
    TempDir state("maf-sec-mcp-owner");
    const auto earlier = unowned_sandbox_for(state.path(), "reused-stdio");
    EXPECT_TRUE(runtime::recorded_owners(earlier).empty());
    auto server = start_server(state.path(), {"--thread", "reused-stdio"});
    ASSERT_GT(server.pid, 0);
    ASSERT_TRUE(send(server, initialize_requests() + call_request(2, "echo reused-ok")));
    if (!output_shows(server, "reused-ok", 60s)) {
        end(server);
        FAIL() << "the server's call never answered";
    }
    expect_reused_and_owned(state.path(), earlier, server.pid);

    end(server);
    EXPECT_TRUE(gone_within(state.path(), earlier, 10s))
        << "the reused sandbox outlived its SIGKILLed MCP server";
}

TEST(McpOwner, AKilledHttpServerTakesTheSandboxItReusedByKeyWithIt) {
    TempDir state("maf-sec-mcp-owner");
    const auto earlier = unowned_sandbox_for(state.path(), "reused-http");
    const int port = 30000 + static_cast<int>(::getpid() % 20000);
    auto server = start_server(
        state.path(), {"--http", fmt::format("127.0.0.1:{}", port), "--thread", "reused-http"});
    ASSERT_GT(server.pid, 0);
    const auto answer = call_over_http(port, "echo reused-ok");
    if (answer.find("reused-ok") == std::string::npos) {
        end(server);
        FAIL() << "the server's call did not answer: " << answer;
    }
    expect_reused_and_owned(state.path(), earlier, server.pid);

    end(server);
    EXPECT_TRUE(gone_within(state.path(), earlier, 10s))
        << "the reused sandbox outlived its SIGKILLed MCP server";
}

TEST(McpOwner, TwoServersSharingAKeyAreCoOwnersAndOneKilledLeavesTheOtherWorking) {
    TempDir state("maf-sec-mcp-owner");
    auto first = start_server(state.path(), {"--thread", "shared"});
    auto second = start_server(state.path(), {"--thread", "shared"});
    ASSERT_GT(first.pid, 0);
    ASSERT_GT(second.pid, 0);
    ASSERT_TRUE(send(first, initialize_requests() + call_request(2, "echo first-ok")));
    ASSERT_TRUE(output_shows(first, "first-ok", 60s));
    ASSERT_TRUE(send(second, initialize_requests() + call_request(2, "echo second-ok")));
    ASSERT_TRUE(output_shows(second, "second-ok", 60s));
    const auto records = Registry(state.path()).list();
    ASSERT_EQ(records.size(), 1u) << "the servers did not share the key's sandbox";
    const auto shared = records.front();
    EXPECT_TRUE(names_owner(shared, first.pid));
    EXPECT_TRUE(names_owner(shared, second.pid));

    end(first);
    // The second server still uses it: the sandbox stays through the first's end, and serves.
    const auto window = std::chrono::steady_clock::now() + 3s;
    while (std::chrono::steady_clock::now() < window) {
        ASSERT_TRUE(Registry::is_alive(shared)) << "the sandbox died with one of its two owners";
        std::this_thread::sleep_for(100ms);
    }
    ASSERT_TRUE(send(second, call_request(3, "echo still-ok")));
    EXPECT_TRUE(output_shows(second, "still-ok", 60s));
    const auto after = Registry(state.path()).get(shared.id);
    ASSERT_TRUE(after);
    EXPECT_TRUE(names_owner(*after, second.pid));

    end(second);
    EXPECT_TRUE(gone_within(state.path(), shared, 10s))
        << "the shared sandbox outlived the last of its SIGKILLed servers";
}
#endif

}  // namespace
}  // namespace maf_sandbox::security
