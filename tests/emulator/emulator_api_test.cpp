#include "emulator_fixture.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

using namespace std::chrono_literals;

class EmulatorApi : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new TempDir();
        process_ = new EmulatorProcess(dir_->path(), {"--fault-create-delay-ms", "300"});
    }
    static void TearDownTestSuite() {
        {
            boost::asio::io_context io;
            SdkClient(io, dir_->path() / "ca.pem", process_->base_url()).delete_all();
        }
        delete process_;
        delete dir_;
    }
    void SetUp() override {
        sdk = std::make_unique<SdkClient>(io, dir_->path() / "ca.pem", process_->base_url());
    }

    static TempDir* dir_;
    static EmulatorProcess* process_;
    boost::asio::io_context io;
    std::unique_ptr<SdkClient> sdk;
};
TempDir* EmulatorApi::dir_ = nullptr;
EmulatorProcess* EmulatorApi::process_ = nullptr;

TEST_F(EmulatorApi, FirstStdoutLineNamesTheHttpsEndpoint) {
    EXPECT_TRUE(process_->base_url().starts_with("https://127.0.0.1:"));
    EXPECT_TRUE(std::filesystem::exists(dir_->path() / "ca.pem"));
}

TEST_F(EmulatorApi, CreateAnswersCreatingThenBecomesRunningFieldByField) {
    const auto r = sdk->call(
        "PUT", "/sandboxes",
        R"({"sourcesRef":{"diskImage":{"name":"python-3.13","isPublic":true}},)"
        R"("resources":{"cpu":"1000m","memory":"2048Mi"},)"
        R"("lifecycle":{"autoSuspendPolicy":{"enabled":true,"interval":300,"mode":"Memory"}},)"
        R"("labels":{"scope":"sc","thread":"th","agent":"ag","kind":"bicep"},)"
        R"("egressPolicy":{"defaultAction":"Deny","hostRules":[{"pattern":"mcr.microsoft.com","action":"Allow"}],"trafficInspection":"Full"}})");
    ASSERT_TRUE(r.status == 200 || r.status == 201) << r.body;
    EXPECT_EQ(r.headers.get("content-type").value_or("").find("application/json"), 0u);
    const auto identity = r.headers.get("x-acas-emulator").value_or("");
    EXPECT_NE(identity.find("isolation=container"), std::string::npos) << identity;
    const auto created = SdkClient::body(r).as_object();
    const std::string id(created.at("id").as_string());
    EXPECT_EQ(id.size(), 36u);
    EXPECT_EQ(id[8], '-');
    EXPECT_EQ(created.at("state").as_string(), "Creating");
    EXPECT_EQ(created.at("labels").at("kind").as_string(), "bicep");
    EXPECT_EQ(created.at("sourcesRef").at("diskImage").at("name").as_string(), "python-3.13");
    EXPECT_EQ(created.at("resources").at("memory").as_string(), "2048Mi");
    EXPECT_EQ(created.at("egressPolicy").at("hostRules").as_array().size(), 1u);
    EXPECT_EQ(created.at("lifecycle").at("autoSuspendPolicy").at("interval").as_int64(), 300);
    EXPECT_TRUE(created.contains("createdAt"));
    EXPECT_TRUE(created.at("ports").is_array());

    const auto running = sdk->wait_for_state(id, "Running");
    EXPECT_EQ(running.at("id").as_string(), id);
    EXPECT_EQ(running.at("labels").at("thread").as_string(), "th");
}

TEST_F(EmulatorApi, ExecRunsShellAsRootWithExitCodesUtf8ReplacementAndTheOneMebibyteRule) {
    const auto id = sdk->create();
    sdk->wait_for_state(id, "Running");
    auto r = sdk->exec(id, "printf out; printf err >&2; id -u; exit 7");
    EXPECT_EQ(r.at("stdout").as_string(), "out0\n");
    EXPECT_EQ(r.at("stderr").as_string(), "err");
    EXPECT_EQ(r.at("exitCode").as_int64(), 7);

    r = sdk->exec(id, R"(printf 'a\377b')");
    EXPECT_EQ(r.at("stdout").as_string(),
              "a\xEF\xBF\xBD"
              "b");

    r = sdk->exec(id, "pwd", "/tmp");
    EXPECT_EQ(r.at("stdout").as_string(), "/tmp\n");

    r = sdk->exec(id, R"(head -c 2000000 /dev/zero | tr '\0' a)");
    EXPECT_EQ(r.at("exitCode").as_int64(), 137);
    const std::string out(r.at("stdout").as_string());
    EXPECT_NE(out.find("[adc] output exceeded 1048576 bytes and was truncated; process terminated"),
              std::string::npos);
    EXPECT_LT(out.size(), 1048576u + 200);
}

TEST_F(EmulatorApi, DetachedProcessOutlivesTheExec) {
    const auto id = sdk->create();
    sdk->wait_for_state(id, "Running");
    sdk->exec(id, "nohup sh -c 'sleep 1; echo done > /tmp/marker' </dev/null >/dev/null 2>&1 &");
    EXPECT_EQ(sdk->exec(id, "cat /tmp/marker 2>/dev/null || echo absent").at("stdout").as_string(),
              "absent\n");
    std::this_thread::sleep_for(1500ms);
    EXPECT_EQ(sdk->exec(id, "cat /tmp/marker").at("stdout").as_string(), "done\n");
}

TEST_F(EmulatorApi, FilePlaneSharesOneFilesystemWithExecAndReportsLivePayloadFields) {
    const auto id = sdk->create();
    sdk->wait_for_state(id, "Running");
    const std::string bytes("bin\0ary\xff", 8);
    auto r = sdk->call("PUT", "/sandboxes/" + id + "/files", bytes,
                       "path=/tmp/deep/dir/real.txt&createDirs=true", "application/octet-stream");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(
        sdk->exec(id, "od -An -c /tmp/deep/dir/real.txt | tr -s ' '").at("exitCode").as_int64(), 0);
    EXPECT_EQ(
        sdk->exec(id, "stat -c '%U %a' /tmp/deep /tmp/deep/dir/real.txt").at("stdout").as_string(),
        "root 755\nroot 644\n");

    r = sdk->call("GET", "/sandboxes/" + id + "/files", {}, "path=/tmp/deep/dir/real.txt");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, bytes);

    auto stat = SdkClient::body(sdk->call("GET", "/sandboxes/" + id + "/files/stat", {},
                                          "path=/tmp/deep/dir/real.txt"))
                    .as_object();
    EXPECT_EQ(stat.at("name").as_string(), "real.txt");
    EXPECT_EQ(stat.at("path").as_string(), "/tmp/deep/dir/real.txt");
    EXPECT_EQ(stat.at("size").as_int64(), 8);
    EXPECT_EQ(stat.at("mode").as_int64(), 420);
    EXPECT_EQ(stat.at("isDir").as_bool(), false);
    EXPECT_EQ(stat.at("isSymlink").as_bool(), false);
    EXPECT_FALSE(stat.contains("symlinkTarget"));
    EXPECT_TRUE(stat.at("modifiedTime").is_int64());

    // Written by exec, seen by the plane; links and FIFOs as the service shows them.
    sdk->exec(id,
              "mkdir -p /w/sub && printf hi > /w/real.txt && ln -s /etc/hostname /w/link-out && "
              "ln -s /w /tmp/wlink && mkfifo /w/pipe");
    stat = SdkClient::body(
               sdk->call("GET", "/sandboxes/" + id + "/files/stat", {}, "path=/w/link-out"))
               .as_object();
    EXPECT_TRUE(stat.at("isSymlink").as_bool());
    EXPECT_EQ(stat.at("symlinkTarget").as_string(), "/etc/hostname");
    EXPECT_EQ(stat.at("size").as_int64(), 13);
    EXPECT_EQ(stat.at("mode").as_int64(), 511);
    // A read follows the final link.
    r = sdk->call("GET", "/sandboxes/" + id + "/files", {}, "path=/w/link-out");
    EXPECT_EQ(r.body, sdk->exec(id, "cat /etc/hostname").at("stdout").as_string());
    // Stat follows a link among the parents and echoes the requested path.
    stat = SdkClient::body(
               sdk->call("GET", "/sandboxes/" + id + "/files/stat", {}, "path=/tmp/wlink/real.txt"))
               .as_object();
    EXPECT_FALSE(stat.at("isSymlink").as_bool());
    EXPECT_EQ(stat.at("path").as_string(), "/tmp/wlink/real.txt");
    // A FIFO stats as an empty regular file.
    stat = SdkClient::body(sdk->call("GET", "/sandboxes/" + id + "/files/stat", {}, "path=/w/pipe"))
               .as_object();
    EXPECT_EQ(stat.at("size").as_int64(), 0);
    EXPECT_FALSE(stat.at("isDir").as_bool());
    EXPECT_FALSE(stat.at("isSymlink").as_bool());
    // A listing follows a symlinked directory; entries' path joins the requested directory.
    const auto listing =
        SdkClient::body(sdk->call("GET", "/sandboxes/" + id + "/files/list", {}, "path=/tmp/wlink"))
            .as_object();
    EXPECT_EQ(listing.at("path").as_string(), "/tmp/wlink");
    const auto& entries = listing.at("entries").as_array();
    ASSERT_EQ(entries.size(), 4u);
    EXPECT_EQ(entries[0].at("path").as_string(), "/tmp/wlink/link-out");
    EXPECT_TRUE(entries[3].at("isDir").as_bool());
    EXPECT_EQ(entries[3].at("mode").as_int64(), 493);
    // Reading a FIFO never answers.
    HttpRequest fifo;
    fifo.target =
        process_->base_url() + kGroup + "/sandboxes/" + id + "/files?" + kApi + "&path=/w/pipe";
    fifo.headers.set("Authorization", "Bearer test-token");
    EXPECT_THROW(run_blocking(io, sdk->client().send(fifo, net::RequestOptions{Seconds(1), {}})),
                 net::DeadlineExceeded);
    // mkdir, delete, 404.
    EXPECT_EQ(sdk->call("POST", "/sandboxes/" + id + "/files/mkdir", R"({"path":"/m/a/b"})").status,
              200);
    stat = SdkClient::body(sdk->call("GET", "/sandboxes/" + id + "/files/stat", {}, "path=/m/a/b"))
               .as_object();
    EXPECT_TRUE(stat.at("isDir").as_bool());
    EXPECT_EQ(
        sdk->call("DELETE", "/sandboxes/" + id + "/files", {}, "path=/m&recursive=true").status,
        204);
    r = sdk->call("GET", "/sandboxes/" + id + "/files/stat", {}, "path=/m");
    EXPECT_EQ(r.status, 404);
    EXPECT_EQ(r.headers.get("content-type"), "application/problem+json");
    EXPECT_EQ(sdk->call("GET", "/sandboxes/" + id + "/files/list", {}, "path=/nope").status, 404);
    EXPECT_EQ(sdk->call("GET", "/sandboxes/" + id + "/files", {}, "path=/nope").status, 404);
}

TEST_F(EmulatorApi, ErrorsAreProblemDetails) {
    auto r = sdk->raw("GET", kGroup + "/sandboxes?api-version=2020-01-01");
    EXPECT_EQ(r.status, 400);
    auto p = SdkClient::body(r).as_object();
    EXPECT_EQ(p.at("status").as_int64(), 400);
    EXPECT_TRUE(p.contains("title") && p.contains("detail") && p.contains("errorCode"));

    r = sdk->raw("GET", kGroup + "/sandboxes?" + kApi, {}, "application/json", false);
    EXPECT_EQ(r.status, 401);
    EXPECT_EQ(r.headers.get("content-type"), "application/problem+json");

    r = sdk->call("GET", "/sandboxes/3e355780-b2d2-414e-865e-d6586e0ddd06");
    EXPECT_EQ(r.status, 404);
    p = SdkClient::body(r).as_object();
    EXPECT_EQ(p.at("title").as_string(), "SandboxNotFound");
    EXPECT_EQ(p.at("detail").as_string(), "Requested document not found.");
    EXPECT_EQ(
        sdk->call("POST", "/sandboxes/nope/executeShellCommand", R"({"command":"true"})").status,
        404);

    r = sdk->call(
        "PUT", "/sandboxes",
        R"({"sourcesRef":{"diskImage":{"name":"host","isPublic":true}},"labels":{"scope":")" +
            std::string(64, 'x') + R"("}})");
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(SdkClient::body(r).at("detail").as_string(),
              "Label value for key 'scope' exceeds 63 characters");

    EXPECT_EQ(sdk->call("PUT", "/sandboxes", "{not json").status, 400);
    r = sdk->call("PUT", "/sandboxes", R"({"disk":"20Gi","cpu":"1","memory":"2Gi"})");
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(SdkClient::body(r).at("detail").as_string(),
              "'sourcesRef' is required when not using a preset sandbox type");
}

TEST_F(EmulatorApi, StopResumeAndDeleteFollowTheStateMachine) {
    const auto id = sdk->create();
    sdk->wait_for_state(id, "Running");
    auto r = sdk->call("POST", "/sandboxes/" + id + "/resume");
    EXPECT_EQ(r.status, 409);
    EXPECT_EQ(SdkClient::body(r).at("title").as_string(), "InvalidSandboxState");
    r = sdk->call("POST", "/sandboxes/" + id + "/stop");
    EXPECT_EQ(r.status, 200);
    const auto stopped = SdkClient::body(sdk->call("GET", "/sandboxes/" + id)).as_object();
    EXPECT_EQ(stopped.at("state").as_string(), "Stopped");
    EXPECT_EQ(stopped.at("stateDetails").at("stoppedReason").as_string(), "UserStopped");
    r = sdk->call("POST", "/sandboxes/" + id + "/executeShellCommand", R"({"command":"true"})");
    EXPECT_EQ(r.status, 409);
    EXPECT_EQ(SdkClient::body(r).at("title").as_string(), "SandboxNotRunning");
    EXPECT_EQ(sdk->call("POST", "/sandboxes/" + id + "/stop").status, 409);
    EXPECT_EQ(sdk->call("POST", "/sandboxes/" + id + "/resume").status, 200);
    EXPECT_EQ(sdk->exec(id, "echo back").at("stdout").as_string(), "back\n");

    r = sdk->call("DELETE", "/sandboxes/" + id);
    EXPECT_TRUE(r.status == 200 || r.status == 202 || r.status == 204);
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    int status = 200;
    while (status != 404 && std::chrono::steady_clock::now() < deadline) {
        status = sdk->call("GET", "/sandboxes/" + id).status;
        std::this_thread::sleep_for(100ms);
    }
    EXPECT_EQ(status, 404);
    const auto again = sdk->call("DELETE", "/sandboxes/" + id).status;
    EXPECT_TRUE(again == 404 || again / 100 == 2);
}

TEST_F(EmulatorApi, LabelSelectorIsAndOfEqualitiesAndPagingFollowsNextLink) {
    const std::string run = fmt::format("run{}", ::getpid());
    for (int i = 0; i < 5; ++i) {
        sdk->create(fmt::format(R"({{"scope":"{}","n":"{}","kind":"{}"}})", run, i,
                                i % 2 == 0 ? "even" : "odd"));
    }
    auto r = sdk->call("GET", "/sandboxes", {}, "labels=scope%3D" + run + "%2Ckind%3Deven");
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(SdkClient::body(r).at("value").as_array().size(), 3u);

    std::string next = process_->base_url() + kGroup +
                       "/sandboxes?api-version=2026-09-01-preview&pageSize=2&labels=scope%3D" + run;
    std::size_t total = 0;
    int pages = 0;
    while (!next.empty()) {
        r = sdk->raw("GET", next);
        ASSERT_EQ(r.status, 200) << r.body;
        const auto page = SdkClient::body(r).as_object();
        total += page.at("value").as_array().size();
        ++pages;
        next = page.contains("nextLink") ? std::string(page.at("nextLink").as_string()) : "";
        if (!next.empty()) {
            EXPECT_TRUE(next.starts_with(process_->base_url())) << next;
        }
    }
    EXPECT_EQ(total, 5u);
    EXPECT_EQ(pages, 3);
}

TEST_F(EmulatorApi, CatalogueHealthAndMetrics) {
    const auto catalogue = SdkClient::body(sdk->call("GET", "/diskimages/public")).as_object();
    std::vector<std::string> names;
    for (const auto& e : catalogue.at("value").as_array()) {
        names.emplace_back(e.at("name").as_string());
    }
    EXPECT_EQ(names, (std::vector<std::string>{"host", "python-3.13"}));
    auto r = sdk->raw("GET", "/healthz", {}, "", false);
    EXPECT_EQ(r.status, 200);
    // /metrics needs the bearer token (no --public-metrics here).
    r = sdk->raw("GET", "/metrics", {}, "", false);
    EXPECT_EQ(r.status, 401);
    r = sdk->raw("GET", "/metrics");
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.body.find("acas_emulator_sandboxes{state=\"Running\"}"), std::string::npos);
    EXPECT_NE(r.body.find("acas_emulator_requests_total{"), std::string::npos);
}

TEST_F(EmulatorApi, DiskImageImportOfAnUnknownReferenceFailsLikeAFailedPull) {
    auto r = sdk->call(
        "PUT", "/diskimages",
        R"({"image":{"base":"myacr.azurecr.io/nothing:1.0"},"labels":{"name":"nothing"}})");
    ASSERT_TRUE(r.status == 200 || r.status == 201) << r.body;
    const std::string id(SdkClient::body(r).at("id").as_string());
    std::string state = "Pending";
    for (int i = 0; i < 100 && state == "Pending"; ++i) {
        state = std::string(SdkClient::body(sdk->call("GET", "/diskimages/" + id))
                                .at("status")
                                .at("state")
                                .as_string());
        std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(state, "Failed");
}

TEST_F(EmulatorApi, LifecycleTimersSuspendThenDelete) {
    const auto id = sdk->create();
    sdk->wait_for_state(id, "Running");
    auto r = sdk->call("POST", "/sandboxes/" + id + "/lifecycle",
                       R"({"autoSuspendPolicy":{"enabled":true,"interval":1,"mode":"Memory"},)"
                       R"("autoDeletePolicy":{"enabled":true,"deleteIntervalInSeconds":2}})");
    EXPECT_EQ(r.status, 200);
    const auto suspended = sdk->wait_for_state(id, "Suspended", 10s);
    EXPECT_EQ(suspended.at("stateDetails").at("stoppedReason").as_string(), "Idle");
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    int status = 200;
    while (status != 404 && std::chrono::steady_clock::now() < deadline) {
        status = sdk->call("GET", "/sandboxes/" + id).status;
        std::this_thread::sleep_for(200ms);
    }
    EXPECT_EQ(status, 404);
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
