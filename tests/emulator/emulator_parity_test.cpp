// What a third-party client written against the service could tell apart from acas-emulator
// (issue 18 item 4): a bad exec working directory is a 4xx, relative file-plane paths resolve
// against the working directory, a deleted sandbox stays Deleting for a while, deleting a stopped
// sandbox does not wait out its frozen guest, and every request field is either implemented and
// echoed or refused by name (docs/emulator.md, "Fields and routes").
#include <algorithm>
#include <chrono>
#include <thread>
#include <tuple>

#include "emulator_fixture.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Long enough that the checks made inside the window finish in it on a loaded machine.
constexpr auto kRetention = 2500ms;

const std::string kSource = R"("sourcesRef":{"diskImage":{"name":"host","isPublic":true}})";

class EmulatorParity : public ::testing::Test {
  protected:
    EmulatorParity()
        : emulator_(dir_.path(), {"--deleting-ms", std::to_string(kRetention.count())}),
          sdk_(io_, dir_.path() / "ca.pem", emulator_.base_url()) {}
    ~EmulatorParity() override { sdk_.delete_all(); }

    std::string running_sandbox() {
        const auto id = sdk_.create();
        sdk_.wait_for_state(id, "Running");
        return id;
    }

    std::size_t sandbox_count() {
        const auto r = sdk_.call("GET", "/sandboxes");
        EXPECT_EQ(r.status, 200) << r.body;
        return SdkClient::body(r).at("value").as_array().size();
    }

    // GET until 404 (the SDK's AsyncDeletionPoller); the time from `since`, or a failure.
    double seconds_until_gone(const std::string& id, Clock::time_point since,
                              std::chrono::seconds timeout = 30s) {
        const auto deadline = Clock::now() + timeout;
        while (Clock::now() < deadline) {
            if (sdk_.call("GET", "/sandboxes/" + id).status == 404) {
                return std::chrono::duration<double>(Clock::now() - since).count();
            }
            std::this_thread::sleep_for(50ms);
        }
        ADD_FAILURE() << "sandbox " << id << " was never gone";
        return 1e9;
    }

    // A 400 problem+json refusal that names `field` first in its detail.
    static void expect_refused_by_name(const HttpResponse& r, const std::string& field,
                                       const std::string& what) {
        EXPECT_EQ(r.status, 400) << what << ": " << r.body;
        EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json") << what;
        boost::system::error_code ec;
        const auto body = json::parse(r.body, ec);
        ASSERT_FALSE(ec) << what << ": " << r.body;
        EXPECT_EQ(body.at("title").as_string(), "FieldNotSupported") << what << ": " << r.body;
        EXPECT_TRUE(std::string(body.at("detail").as_string()).starts_with("'" + field + "'"))
            << what << ": " << r.body;
    }

    TempDir dir_;
    boost::asio::io_context io_;
    EmulatorProcess emulator_;
    SdkClient sdk_;
};

TEST_F(EmulatorParity, ExecInAWorkingDirectoryThatCannotBeEnteredIs400ProblemJsonNotA5xx) {
    const auto id = running_sandbox();
    const auto exec = [&](const std::string& cwd) {
        return sdk_.call("POST", "/sandboxes/" + id + "/executeShellCommand",
                         json::serialize(json::object{
                             {"command", "echo ran > /tmp/ran-" + std::to_string(cwd.size())},
                             {"workingDirectory", cwd}}));
    };
    for (const std::string cwd : {"/no/such/directory", "/etc/passwd"}) {
        const auto r = exec(cwd);
        // 5xx is what every ACAS client retries: one call would run (or fail) four times.
        EXPECT_EQ(r.status, 400) << cwd << ": " << r.body;
        EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json");
        const auto body = SdkClient::body(r).as_object();
        EXPECT_EQ(body.at("title").as_string(), "InvalidWorkingDirectory") << r.body;
        EXPECT_NE(std::string(body.at("detail").as_string()).find(cwd), std::string::npos)
            << r.body;
        // The command never ran.
        EXPECT_EQ(
            sdk_.exec(id, "ls /tmp/ran-" + std::to_string(cwd.size()) + " 2>/dev/null | wc -l")
                .at("stdout")
                .as_string(),
            "0\n");
    }
    // A directory that exists still works, and the sandbox is unharmed.
    EXPECT_EQ(sdk_.exec(id, "pwd", "/tmp").at("stdout").as_string(), "/tmp\n");
}

TEST_F(EmulatorParity, RelativeFilePlanePathsNameWhatACommandRunWithoutWorkingDirectorySees) {
    const auto id = running_sandbox();
    const std::string s = "/sandboxes/" + id;
    auto r = sdk_.call("PUT", s + "/files", "hello", "path=hello.txt", "application/octet-stream");
    ASSERT_EQ(r.status, 200) << r.body;
    // exec without workingDirectory runs in the sandbox's working directory, "/".
    EXPECT_EQ(sdk_.exec(id, "cat hello.txt").at("stdout").as_string(), "hello");
    EXPECT_EQ(sdk_.exec(id, "cat /hello.txt").at("stdout").as_string(), "hello");
    r = sdk_.call("GET", s + "/files", {}, "path=hello.txt");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, "hello");
    // Answers name the resolved path.
    const auto stat = SdkClient::body(sdk_.call("GET", s + "/files/stat", {}, "path=hello.txt"));
    EXPECT_EQ(stat.at("path").as_string(), "/hello.txt") << stat;
    EXPECT_EQ(stat.at("size").as_int64(), 5);

    r = sdk_.call("POST", s + "/files/mkdir", R"({"path":"rel-dir/sub"})");
    EXPECT_EQ(r.status / 100, 2) << r.body;
    EXPECT_EQ(sdk_.exec(id, "test -d /rel-dir/sub && echo yes").at("stdout").as_string(), "yes\n");
    r = sdk_.call("PUT", s + "/files", "x", "path=rel-dir/sub/../f.txt",
                  "application/octet-stream");
    EXPECT_EQ(r.status, 200) << r.body;
    const auto listing = SdkClient::body(sdk_.call("GET", s + "/files/list", {}, "path=rel-dir"));
    EXPECT_EQ(listing.at("path").as_string(), "/rel-dir") << listing;
    std::vector<std::string> paths;
    for (const auto& e : listing.at("entries").as_array()) {
        paths.emplace_back(e.at("path").as_string());
    }
    std::sort(paths.begin(), paths.end());
    EXPECT_EQ(paths, (std::vector<std::string>{"/rel-dir/f.txt", "/rel-dir/sub"}));

    r = sdk_.call("DELETE", s + "/files", {}, "path=hello.txt");
    EXPECT_EQ(r.status / 100, 2) << r.body;
    EXPECT_EQ(sdk_.exec(id, "test -e /hello.txt || echo gone").at("stdout").as_string(), "gone\n");
    // An empty path is still refused.
    EXPECT_EQ(sdk_.call("GET", s + "/files/stat", {}, "path=").status, 400);
}

TEST_F(EmulatorParity, ADeletedSandboxStaysDeletingForTheConfiguredWhileAndADeleteAgainSucceeds) {
    const auto id = running_sandbox();
    const auto asked = Clock::now();
    ASSERT_EQ(sdk_.call("DELETE", "/sandboxes/" + id).status, 202);
    // Still there, Deleting, by id and in the listing (the backend's purge polls the listing).
    const auto got = sdk_.call("GET", "/sandboxes/" + id);
    ASSERT_EQ(got.status, 200) << got.body;
    EXPECT_EQ(SdkClient::body(got).at("state").as_string(), "Deleting");
    const auto listed = SdkClient::body(sdk_.call("GET", "/sandboxes")).at("value").as_array();
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0].at("state").as_string(), "Deleting");
    // Deleting an already-terminating sandbox again succeeds; exec on it is refused.
    EXPECT_EQ(sdk_.call("DELETE", "/sandboxes/" + id).status, 202);
    EXPECT_EQ(
        sdk_.call("POST", "/sandboxes/" + id + "/executeShellCommand", R"({"command":"true"})")
            .status,
        409);
    // Gone no sooner than the configured while after the DELETE (a lower bound only: load may
    // only make it later).
    const double gone = seconds_until_gone(id, asked);
    EXPECT_GE(gone, std::chrono::duration<double>(kRetention).count() - 0.05);
    EXPECT_EQ(sdk_.call("DELETE", "/sandboxes/" + id).status, 404);
}

TEST_F(EmulatorParity, DeletingAStoppedSandboxDoesNotWaitOutItsFrozenGuest) {
    const auto id = running_sandbox();
    ASSERT_EQ(sdk_.call("POST", "/sandboxes/" + id + "/stop").status, 200);
    const auto asked = Clock::now();
    ASSERT_EQ(sdk_.call("DELETE", "/sandboxes/" + id).status, 202);
    // A frozen PID 1 cannot act on SIGTERM: without the thaw the runtime waits its 5 s grace
    // before SIGKILL, so the sandbox would be gone after 5 s at the earliest.
    EXPECT_LT(seconds_until_gone(id, asked), 4.5);
}

TEST_F(EmulatorParity, CreateFieldsTheEmulatorDoesNotImplementAreRefusedByName) {
    const std::vector<std::pair<std::string, std::string>> cases{
        {"ports", R"("ports":[{"port":8080}])"},
        {"volumes", R"("volumes":[{"name":"data","mountPath":"/mnt/data"}])"},
        {"connections", R"("connections":[{"name":"c1"}])"},
        {"entrypoint", R"("entrypoint":["/bin/sleep","infinity"])"},
        {"cmd", R"("cmd":["-c","true"])"},
        {"vmmType", R"("vmmType":"cloudhypervisor")"},
        {"presetSandboxType", R"("presetSandboxType":"copilot")"},
        {"customerVnetConnectionName", R"("customerVnetConnectionName":"vnet-1")"},
        {"skipEgressProxy", R"("skipEgressProxy":true)"},
        {"workingDirectory", R"("workingDirectory":"/app")"},
        {"resources.disk", R"("resources":{"cpu":"1000m","disk":"20Gi"})"},
        {"resources.gpu", R"("resources":{"gpu":"1"})"},
        {"sourcesRef.diskImage.tag", R"("sourcesRef":{"diskImage":{"name":"host","tag":"x"}})"},
        {"lifecycle.autoDeletePolicy.deleteIntervalSeconds",
         R"("lifecycle":{"autoDeletePolicy":{"enabled":true,"deleteIntervalSeconds":60}})"},
        {"egressPolicy.hostRules[0].ports",
         R"("egressPolicy":{"defaultAction":"Deny","hostRules":[{"pattern":"a.example","action":"Allow","ports":[8443]}]})"},
        {"egressPolicy.allowAll", R"("egressPolicy":{"defaultAction":"Deny","allowAll":true})"},
        {"anotherField", R"("anotherField":1)"},
    };
    for (const auto& [field, fragment] : cases) {
        // The field's own source wins when it carries one (sourcesRef).
        const auto body = fragment.starts_with(R"("sourcesRef")")
                              ? "{" + fragment + "}"
                              : "{" + kSource + "," + fragment + "}";
        expect_refused_by_name(sdk_.call("PUT", "/sandboxes", body), field, body);
    }
    // Nothing was created by any refused body.
    EXPECT_EQ(sandbox_count(), 0u);

    // What asks for nothing, or for what the emulator is, is accepted and answered as it is.
    const auto r = sdk_.call("PUT", "/sandboxes",
                             "{" + kSource +
                                 R"(,"ports":[],"volumes":[],"connections":[],"entrypoint":[],)"
                                 R"("cmd":[],"vmmType":"maf-emulator","skipEgressProxy":false,)"
                                 R"("environment":{"GREETING":"hi"}})");
    ASSERT_EQ(r.status, 201) << r.body;
    const auto created = SdkClient::body(r).as_object();
    EXPECT_EQ(created.at("vmmType").as_string(), "maf-emulator");
    EXPECT_TRUE(created.at("ports").as_array().empty());
    EXPECT_EQ(created.at("environment").at("GREETING").as_string(), "hi");
    const std::string id(created.at("id").as_string());
    sdk_.wait_for_state(id, "Running");
    EXPECT_EQ(sdk_.exec(id, "printf %s \"$GREETING\"").at("stdout").as_string(), "hi");
}

TEST_F(EmulatorParity, DiskImageEntrypointAndCmdAreRefusedByNameAndPullAuthorityIsAccepted) {
    const auto images = [&]() {
        return SdkClient::body(sdk_.call("GET", "/diskimages")).at("value").as_array().size();
    };
    const auto before = images();
    expect_refused_by_name(
        sdk_.call("PUT", "/diskimages", R"({"image":{"base":"r.io/a:1","entrypoint":["/x"]}})"),
        "image.entrypoint", "entrypoint");
    expect_refused_by_name(
        sdk_.call("PUT", "/diskimages", R"({"image":{"base":"r.io/a:1","cmd":["serve"]}})"),
        "image.cmd", "cmd");
    expect_refused_by_name(
        sdk_.call("PUT", "/diskimages", R"({"image":{"base":"r.io/a:1"},"dockerfile":"FROM x"})"),
        "dockerfile", "unknown field");
    EXPECT_EQ(images(), before);
    // The identity only authorises a pull (reference 4.6), which the local registry admits.
    const auto r = sdk_.call("PUT", "/diskimages",
                             R"({"image":{"base":"r.io/a:1","entrypoint":[]},)"
                             R"("labels":{"name":"a"},"managedIdentityResourceId":"/subscriptions/)"
                             R"(s/resourceGroups/g/providers/Microsoft.ManagedIdentity/)"
                             R"(userAssignedIdentities/pull"})");
    EXPECT_EQ(r.status, 201) << r.body;
    EXPECT_EQ(images(), before + 1);
    const auto typed = sdk_.call("PUT", "/diskimages",
                                 R"({"image":{"base":"r.io/a:1"},"managedIdentityResourceId":7})");
    EXPECT_EQ(typed.status, 400) << typed.body;
}

TEST_F(EmulatorParity, LifecycleHonoursDeleteIntervalInSecondsAndRefusesTheMisspeltForms) {
    const auto id = running_sandbox();
    const std::string lifecycle = "/sandboxes/" + id + "/lifecycle";
    expect_refused_by_name(
        sdk_.call("POST", lifecycle,
                  R"({"autoDeletePolicy":{"enabled":true,"deleteIntervalSeconds":1}})"),
        "autoDeletePolicy.deleteIntervalSeconds", "TS port spelling");
    const auto misspelt = sdk_.call(
        "POST", lifecycle, R"({"autoDeletePolicy":{"enabled":true,"deleteIntervalSeconds":1}})");
    EXPECT_NE(misspelt.body.find("deleteIntervalInSeconds"), std::string::npos) << misspelt.body;
    expect_refused_by_name(
        sdk_.call("POST", lifecycle, R"({"autoSuspendPolicy":{"idleTimeoutInSeconds":5}})"),
        "autoSuspendPolicy.idleTimeoutInSeconds", "reader alias");
    expect_refused_by_name(sdk_.call("POST", lifecycle, R"({"autoDelete":{"enabled":true}})"),
                           "autoDelete", "reader alias");
    expect_refused_by_name(
        sdk_.call("POST", lifecycle,
                  R"({"autoDeletePolicy":{"deleteIntervalInSeconds":1,"trigger":"AfterCreate"}})"),
        "autoDeletePolicy.trigger", "unimplemented trigger");
    // A refused policy changed nothing: the sandbox keeps running past the interval it named.
    EXPECT_FALSE(SdkClient::body(sdk_.call("GET", "/sandboxes/" + id))
                     .at("lifecycle")
                     .as_object()
                     .contains("autoDeletePolicy"));

    // The service's spelling is stored, echoed and acted on: deleted 1 s after the stop.
    const auto r = sdk_.call(
        "POST", lifecycle,
        R"({"autoDeletePolicy":{"enabled":true,"deleteIntervalInSeconds":1,"trigger":"AfterSuspend"}})");
    ASSERT_EQ(r.status, 200) << r.body;
    const auto echoed = SdkClient::body(sdk_.call("GET", "/sandboxes/" + id));
    EXPECT_EQ(
        echoed.at("lifecycle").at("autoDeletePolicy").at("deleteIntervalInSeconds").as_int64(), 1);
    const auto stopped = Clock::now();
    ASSERT_EQ(sdk_.call("POST", "/sandboxes/" + id + "/stop").status, 200);
    EXPECT_GE(seconds_until_gone(id, stopped), 1.0);
}

TEST_F(EmulatorParity, UnknownExecMkdirEgressAndQueryFieldsAreRefusedByName) {
    const auto id = running_sandbox();
    const std::string s = "/sandboxes/" + id;
    expect_refused_by_name(sdk_.call("POST", s + "/executeShellCommand",
                                     R"({"command":"touch /tmp/timed","timeout":5})"),
                           "timeout", "exec timeout");
    EXPECT_EQ(sdk_.exec(id, "test -e /tmp/timed || echo never-ran").at("stdout").as_string(),
              "never-ran\n");
    expect_refused_by_name(sdk_.call("POST", s + "/files/mkdir", R"({"path":"/tmp/m","mode":7})"),
                           "mode", "mkdir mode");
    expect_refused_by_name(sdk_.call("POST", s + "/egresspolicy",
                                     R"({"defaultAction":"Deny","bypass":["10.0.0.0/8"]})"),
                           "bypass", "egress policy key");
    expect_refused_by_name(sdk_.call("GET", s + "/files/stat", {}, "path=/tmp&containerName=main"),
                           "containerName", "containerName");
}

// The reference's routes the emulator does not serve answer 501 naming the operation (never
// retried by azure-core), not the 404 a client reads as "no such sandbox or snapshot".
TEST_F(EmulatorParity, ReferenceRoutesTheEmulatorDoesNotServeAre501NamingTheOperation) {
    const auto id = running_sandbox();
    const std::vector<std::tuple<std::string, std::string, std::string>> routes{
        {"POST", "/sandboxes/" + id + "/snapshot", "POST /sandboxes/{id}/snapshot"},
        {"POST", "/sandboxes/" + id + "/commit", "POST /sandboxes/{id}/commit"},
        {"POST", "/sandboxes/" + id + "/ports/add", "POST /sandboxes/{id}/ports/add"},
        {"PUT", "/sandboxes/" + id + "/ports", "PUT /sandboxes/{id}/ports"},
        {"POST", "/sandboxes/" + id + "/volumes/add", "POST /sandboxes/{id}/volumes/add"},
        {"GET", "/sandboxes/" + id + "/egress-decisions", "GET /sandboxes/{id}/egress-decisions"},
        {"GET", "/sandboxes/" + id + "/stats", "GET /sandboxes/{id}/stats"},
        {"POST", "/sandboxes/" + id + "/enable", "POST /sandboxes/{id}/enable"},
        {"GET", "/snapshots", "GET /snapshots"},
        {"DELETE", "/snapshots/abc", "DELETE /snapshots/{id}"},
        {"GET", "/volumes", "GET /volumes"},
        {"PUT", "/secrets/s1", "PUT /secrets/{id}"},
        {"POST", "/secrets/s1/peek", "POST /secrets/{id}/peek"},
    };
    for (const auto& [method, path, operation] : routes) {
        const auto r = sdk_.call(method, path, method == "GET" ? "" : "{}");
        EXPECT_EQ(r.status, 501) << method << " " << path << ": " << r.body;
        EXPECT_EQ(r.headers.get("content-type").value_or(""), "application/problem+json");
        const auto body = SdkClient::body(r).as_object();
        EXPECT_EQ(body.at("title").as_string(), "RouteNotSupported") << r.body;
        EXPECT_TRUE(std::string(body.at("detail").as_string()).starts_with("'" + operation))
            << r.body;
    }
    // A path no reference route has is still a plain 404.
    EXPECT_EQ(sdk_.call("GET", "/sandboxes/" + id + "/nothing-here").status, 404);
    // And the sandbox is untouched by any of it.
    EXPECT_EQ(SdkClient::body(sdk_.call("GET", "/sandboxes/" + id)).at("state").as_string(),
              "Running");
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
