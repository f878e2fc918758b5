// The service behaviours the first emulator only recorded: exec waits for EOF of inherited
// pipes, output past 1 MiB kills the command, stop and suspend freeze the guest, several sandbox
// groups are separate namespaces, and faults can be switched while serving.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "emulator_fixture.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

class EmulatorSemantics : public ::testing::Test {
  protected:
    EmulatorSemantics() : emulator_(dir_.path()), sdk_(io_, dir_.path() / "ca.pem", base()) {}
    ~EmulatorSemantics() override { sdk_.delete_all(); }
    std::string base() const { return emulator_.base_url(); }

    std::string running_sandbox() {
        const auto id = sdk_.create();
        sdk_.wait_for_state(id, "Running");
        return id;
    }

    TempDir dir_;
    boost::asio::io_context io_;
    EmulatorProcess emulator_;
    SdkClient sdk_;
};

TEST_F(EmulatorSemantics, ExecWaitsForABackgroundChildHoldingStdoutAsTheServiceDoes) {
    const auto id = running_sandbox();
    const auto start = Clock::now();
    const auto r = sdk_.exec(id, "printf before; (sleep 1; printf after) &");
    EXPECT_EQ(r.at("stdout").as_string(), "beforeafter");
    EXPECT_EQ(r.at("exitCode").as_int64(), 0);
    EXPECT_GE(seconds_since(start), 0.9);
}

TEST_F(EmulatorSemantics, ExecDoesNotWaitForAChildThatDetachedItsOutput) {
    const auto id = running_sandbox();
    const auto start = Clock::now();
    const auto r = sdk_.exec(id, "nohup sleep 30 >/dev/null 2>&1 & echo started");
    EXPECT_EQ(r.at("stdout").as_string(), "started\n");
    EXPECT_LT(seconds_since(start), 5.0);
}

TEST_F(EmulatorSemantics, OutputPastOneMebibyteKillsACommandThatNeverStops) {
    const auto id = running_sandbox();
    const auto start = Clock::now();
    // Without the kill this would run until the 30-minute server limit.
    const auto r = sdk_.exec(id, "yes; echo never-reached");
    EXPECT_EQ(r.at("exitCode").as_int64(), 137);
    const std::string out(r.at("stdout").as_string());
    EXPECT_EQ(out.find("never-reached"), std::string::npos);
    EXPECT_NE(out.find("[adc] output exceeded 1048576 bytes and was truncated; process terminated"),
              std::string::npos);
    EXPECT_LT(seconds_since(start), 10.0);
    // Nothing of the flood survives the kill.
    EXPECT_EQ(sdk_.exec(id, "pgrep -x yes || echo none").at("stdout").as_string(), "none\n");
}

TEST_F(EmulatorSemantics, StopFreezesTheGuestAndResumeThawsIt) {
    const auto id = running_sandbox();
    // A ticker that stamps the time every 50 ms, detached from the exec.
    sdk_.exec(id,
              "nohup sh -c 'while :; do date +%s%N >> /tmp/ticks; sleep 0.05; done' "
              ">/dev/null 2>&1 &");
    std::this_thread::sleep_for(300ms);
    ASSERT_EQ(sdk_.call("POST", "/sandboxes/" + id + "/stop").status, 200);
    // Stopped: exec is refused as the service refuses it.
    const auto refused =
        sdk_.call("POST", "/sandboxes/" + id + "/executeShellCommand", R"({"command":"echo no"})");
    EXPECT_EQ(refused.status, 409);
    EXPECT_EQ(SdkClient::body(refused).at("title").as_string(), "SandboxNotRunning");
    std::this_thread::sleep_for(1200ms);
    ASSERT_EQ(sdk_.call("POST", "/sandboxes/" + id + "/resume").status, 200);
    std::this_thread::sleep_for(200ms);
    // The largest gap between two ticks spans the stop: the ticker did not run while stopped.
    const auto gap = sdk_.exec(id,
                               "awk 'NR>1 && $1-p>m {m=$1-p} {p=$1} END {print int(m/1000000)}' "
                               "/tmp/ticks");
    EXPECT_GE(std::stoi(std::string(gap.at("stdout").as_string())), 1000) << gap;
    // Resumed: it ticks again.
    const auto before = sdk_.exec(id, "wc -l < /tmp/ticks").at("stdout");
    std::this_thread::sleep_for(300ms);
    EXPECT_NE(sdk_.exec(id, "wc -l < /tmp/ticks").at("stdout"), before);
}

TEST_F(EmulatorSemantics, DeletingAStoppedSandboxEndsItsFrozenProcesses) {
    const auto id = running_sandbox();
    ASSERT_EQ(sdk_.call("POST", "/sandboxes/" + id + "/stop").status, 200);
    EXPECT_EQ(sdk_.call("DELETE", "/sandboxes/" + id).status, 202);
    const auto deadline = Clock::now() + 10s;
    int status = 0;
    while (Clock::now() < deadline &&
           (status = sdk_.call("GET", "/sandboxes/" + id).status) != 404) {
        std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(status, 404);
}

TEST_F(EmulatorSemantics, EachSandboxGroupIsItsOwnNamespace) {
    const std::string other =
        "/subscriptions/11111111-1111-1111-1111-111111111111/resourceGroups/rg-other/"
        "sandboxGroups/group-other";
    const auto in_test_group = running_sandbox();
    const auto call_other = [&](const std::string& method, const std::string& path,
                                const std::string& body = {}) {
        return sdk_.raw(method, other + path + "?" + kApi, body);
    };
    // Invisible from the other group, by id and in listings.
    EXPECT_EQ(call_other("GET", "/sandboxes/" + in_test_group).status, 404);
    EXPECT_EQ(call_other("POST", "/sandboxes/" + in_test_group + "/executeShellCommand",
                         R"({"command":"true"})")
                  .status,
              404);
    EXPECT_EQ(call_other("DELETE", "/sandboxes/" + in_test_group).status, 404);
    EXPECT_TRUE(SdkClient::body(call_other("GET", "/sandboxes")).at("value").as_array().empty());
    // A sandbox made in the other group is listed there and not here.
    const auto made = call_other("PUT", "/sandboxes",
                                 R"({"sourcesRef":{"diskImage":{"name":"host","isPublic":true}}})");
    ASSERT_EQ(made.status, 201) << made.body;
    const std::string other_id(SdkClient::body(made).at("id").as_string());
    const auto listed_other = SdkClient::body(call_other("GET", "/sandboxes"));
    ASSERT_EQ(listed_other.at("value").as_array().size(), 1u);
    EXPECT_EQ(listed_other.at("value").as_array()[0].at("id").as_string(), other_id);
    const auto listed_here = SdkClient::body(sdk_.call("GET", "/sandboxes"));
    ASSERT_EQ(listed_here.at("value").as_array().size(), 1u);
    EXPECT_EQ(listed_here.at("value").as_array()[0].at("id").as_string(), in_test_group);
    // Group names compare case-insensitively, as Azure resource paths do.
    const std::string shouting =
        "/subscriptions/11111111-1111-1111-1111-111111111111/resourceGroups/RG-OTHER/"
        "sandboxGroups/Group-Other";
    EXPECT_EQ(sdk_.raw("GET", shouting + "/sandboxes/" + other_id + "?" + kApi).status, 200);
    // Disk images are per group too.
    const auto image = call_other("PUT", "/diskimages", R"({"image":{"base":"r.io/x:1"}})");
    ASSERT_EQ(image.status, 201);
    const std::string image_id(SdkClient::body(image).at("id").as_string());
    EXPECT_EQ(sdk_.call("GET", "/diskimages/" + image_id).status, 404);
    EXPECT_TRUE(SdkClient::body(sdk_.call("GET", "/diskimages")).at("value").as_array().empty());
    call_other("DELETE", "/diskimages/" + image_id);
    EXPECT_EQ(call_other("DELETE", "/sandboxes/" + other_id).status, 202);
    for (int i = 0; i < 100 && call_other("GET", "/sandboxes/" + other_id).status != 404; ++i) {
        std::this_thread::sleep_for(50ms);
    }
}

TEST_F(EmulatorSemantics, FaultsAreSwitchedWhileServingThroughTheAdminRoute) {
    EXPECT_EQ(sdk_.raw("GET", "/admin/faults", {}, "", false).status, 401);
    auto r = sdk_.raw("PUT", "/admin/faults", R"({"rate5xx":1.0})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(sdk_.call("GET", "/sandboxes").status, 503);
    // The admin route itself is never faulted.
    EXPECT_EQ(SdkClient::body(sdk_.raw("GET", "/admin/faults")).at("rate5xx").as_double(), 1.0);
    r = sdk_.raw("PUT", "/admin/faults", R"({"forbiddenMs":400,"rate429":0})");
    ASSERT_EQ(r.status, 200);
    r = sdk_.call("GET", "/sandboxes");
    EXPECT_EQ(r.status, 403);
    EXPECT_TRUE(r.body.empty());
    std::this_thread::sleep_for(450ms);
    EXPECT_EQ(sdk_.call("GET", "/sandboxes").status, 200);
    r = sdk_.raw("PUT", "/admin/faults", R"({"rate429":1,"retryAfterMs":250})");
    ASSERT_EQ(r.status, 200);
    r = sdk_.call("GET", "/sandboxes");
    EXPECT_EQ(r.status, 429);
    EXPECT_EQ(r.headers.get("retry-after-ms").value_or(""), "250");
    EXPECT_EQ(r.headers.get("retry-after").value_or(""), "1");
    EXPECT_EQ(sdk_.raw("PUT", "/admin/faults", R"({"rate429":2})").status, 400);
    EXPECT_EQ(sdk_.raw("PUT", "/admin/faults", R"({"nonsense":1})").status, 400);
    // Confined to one operation, a fault leaves the others alone.
    ASSERT_EQ(
        sdk_.raw("PUT", "/admin/faults", R"({"rate5xx":1,"only":"GET /sandboxes/{id}"})").status,
        200);
    EXPECT_EQ(sdk_.call("GET", "/sandboxes").status, 200);
    EXPECT_EQ(sdk_.call("GET", "/sandboxes/00000000-0000-0000-0000-000000000001").status, 503);
    EXPECT_EQ(sdk_.raw("PUT", "/admin/faults", "{}").status, 200);
    EXPECT_EQ(sdk_.call("GET", "/sandboxes").status, 200);
}

// A loopback HTTP server answering every request `200 ok`, on a thread; stopped on destruction.
class OkServer {
  public:
    OkServer() {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
            ::listen(fd_, 16) != 0 ||
            ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
            ::pipe(stop_) != 0) {
            throw std::runtime_error("cannot start the loopback server");
        }
        port_ = ntohs(addr.sin_port);
        thread_ = std::thread([this] { serve(); });
    }
    ~OkServer() {
        [[maybe_unused]] auto n = ::write(stop_[1], "x", 1);
        thread_.join();
        ::close(fd_);
        ::close(stop_[0]);
        ::close(stop_[1]);
    }
    int port() const { return port_; }

  private:
    void serve() {
        for (;;) {
            pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0 || fds[1].revents != 0) {
                return;
            }
            const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) {
                continue;
            }
            char buffer[4096];
            pollfd in{client, POLLIN, 0};
            if (::poll(&in, 1, 5000) > 0 && ::read(client, buffer, sizeof buffer) > 0) {
                const char reply[] =
                    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                [[maybe_unused]] auto n = ::write(client, reply, sizeof reply - 1);
            }
            ::close(client);
        }
    }
    int fd_ = -1;
    int stop_[2] = {-1, -1};
    int port_ = 0;
    std::thread thread_;
};

// The emulator's process environment carries the operator's egress switches (as a deployment
// would): a hosts file naming the test's hosts and permission to reach loopback, where they live.
class EgressEnvironment {
  public:
    explicit EgressEnvironment(const std::filesystem::path& hosts_file) {
        std::ofstream(hosts_file) << "127.0.0.1 allowed.test denied.test\n";
        ::setenv("MAF_SANDBOX_EGRESS_HOSTS_FILE", hosts_file.c_str(), 1);
        ::setenv("MAF_SANDBOX_EGRESS_ALLOW_PRIVATE", "1", 1);
    }
    ~EgressEnvironment() {
        ::unsetenv("MAF_SANDBOX_EGRESS_HOSTS_FILE");
        ::unsetenv("MAF_SANDBOX_EGRESS_ALLOW_PRIVATE");
    }
};

TEST(EmulatorEgress, AllowHostRulesAreEnforcedAndADeniedHostIsRefusedWith403) {
    TempDir dir;
    OkServer server;
    std::optional<EmulatorProcess> emulator;
    {
        EgressEnvironment environment(dir.path() / "hosts");
        emulator.emplace(dir.path());
    }
    boost::asio::io_context io;
    SdkClient sdk(io, dir.path() / "ca.pem", emulator->base_url());
    const auto allowed = fmt::format("allowed.test:{}", server.port());
    const auto made = sdk.call(
        "PUT", "/sandboxes",
        fmt::format(R"({{"sourcesRef":{{"diskImage":{{"name":"host","isPublic":true}}}},)"
                    R"("egressPolicy":{{"defaultAction":"Deny","trafficInspection":"Full",)"
                    R"("hostRules":[{{"pattern":"{}","action":"Allow"}}]}}}})",
                    allowed));
    ASSERT_EQ(made.status, 201) << made.body;
    const std::string id(SdkClient::body(made).at("id").as_string());
    sdk.wait_for_state(id, "Running");
    const auto curl = [&](const std::string& host) {
        return std::string(
            sdk.exec(id, fmt::format("curl -s -m 10 -D - -o /dev/null http://{}:{}/ 2>&1; true",
                                     host, server.port()))
                .at("stdout")
                .as_string());
    };
    EXPECT_NE(curl("allowed.test").find("200 OK"), std::string::npos);
    const auto denied = curl("denied.test");
    EXPECT_NE(denied.find("403"), std::string::npos) << denied;
    EXPECT_NE(denied.find("x-deny-reason"), std::string::npos) << denied;

    // Deny without rules is closed: no proxy, no route, nothing reaches the server.
    const auto closed = sdk.create();
    sdk.wait_for_state(closed, "Running");
    const auto none = sdk.exec(closed, fmt::format("curl -s -m 5 -o /dev/null -w '%{{http_code}}' "
                                                   "http://127.0.0.1:{}/ || echo refused",
                                                   server.port()));
    EXPECT_EQ(none.at("stdout").as_string().find("200"), std::string::npos) << none;

    // What the runtime cannot enforce is refused at create rather than silently widened.
    const auto refused = sdk.call(
        "PUT", "/sandboxes",
        R"({"sourcesRef":{"diskImage":{"name":"host","isPublic":true}},)"
        R"("egressPolicy":{"defaultAction":"Allow","hostRules":[{"pattern":"x.test","action":"Deny"}]}})");
    EXPECT_EQ(refused.status, 400);
    EXPECT_EQ(SdkClient::body(refused).at("title").as_string(), "EgressPolicyNotSupported");
    sdk.delete_all();
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
