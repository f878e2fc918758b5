#include <set>

#include "emulator_fixture.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

using namespace std::chrono_literals;

TEST(EmulatorRestart, TwoRestartsLoseNoSandboxLabelOrFileAndSandboxesKeepRunning) {
    TempDir dir;
    boost::asio::io_context io;
    auto first = std::make_unique<EmulatorProcess>(dir.path());
    SdkClient sdk(io, dir.path() / "ca.pem", first->base_url());
    const auto kept = sdk.create(R"({"scope":"restart","thread":"t"})");
    sdk.wait_for_state(kept, "Running");
    const auto stopped = sdk.create(R"({"scope":"restart","thread":"u"})");
    sdk.wait_for_state(stopped, "Running");
    ASSERT_EQ(sdk.call("POST", "/sandboxes/" + stopped + "/stop").status, 200);
    ASSERT_EQ(
        sdk.call("PUT", "/sandboxes/" + kept + "/files", "persisted",
                 "path=/maf-sandbox/work/keep.txt&createDirs=true", "application/octet-stream")
            .status,
        200);
    // A process started before the restart must still be there after it.
    sdk.exec(kept, "nohup sleep 300 </dev/null >/dev/null 2>&1 & echo $! > /tmp/sleeper.pid");
    const auto sleeper = sdk.exec(kept, "cat /tmp/sleeper.pid").at("stdout");

    for (int restart = 0; restart < 2; ++restart) {
        const int status = first->terminate();
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
        first = std::make_unique<EmulatorProcess>(dir.path());
        sdk.set_base(first->base_url());
        sdk.client().close_idle();
        const auto a = SdkClient::body(sdk.call("GET", "/sandboxes/" + kept)).as_object();
        EXPECT_EQ(a.at("state").as_string(), "Running");
        EXPECT_EQ(a.at("labels").at("scope").as_string(), "restart");
        const auto b = SdkClient::body(sdk.call("GET", "/sandboxes/" + stopped)).as_object();
        EXPECT_EQ(b.at("state").as_string(), "Stopped");
        const auto r =
            sdk.call("GET", "/sandboxes/" + kept + "/files", {}, "path=/maf-sandbox/work/keep.txt");
        EXPECT_EQ(r.body, "persisted");
        EXPECT_EQ(sdk.exec(kept, "kill -0 $(cat /tmp/sleeper.pid) && echo alive")
                      .at("stdout")
                      .as_string(),
                  "alive\n");
        const auto listed =
            SdkClient::body(sdk.call("GET", "/sandboxes", {}, "labels=scope%3Drestart"))
                .at("value")
                .as_array();
        EXPECT_EQ(listed.size(), 2u);
    }
    EXPECT_EQ(sdk.exec(kept, "cat /tmp/sleeper.pid").at("stdout"), sleeper);
    sdk.delete_all();
}

// Retries like azure-core plus the SDK's 403 rule: 403, 408, 429 and 5xx are retried, honouring
// Retry-After; a request answered 429 or 403 was never processed, so re-sending it is safe.
HttpResponse well_behaved(SdkClient& sdk, const std::string& method, const std::string& path,
                          const std::string& body = {}, const std::string& query = {}) {
    for (int attempt = 0; attempt < 40; ++attempt) {
        const auto r = sdk.call(method, path, body, query);
        if (r.status != 403 && r.status != 408 && r.status != 429 && r.status < 500) {
            return r;
        }
        const auto after = r.headers.get("retry-after");
        std::this_thread::sleep_for(after ? std::chrono::milliseconds(std::stoi(*after) * 1000)
                                          : 100ms);
    }
    ADD_FAILURE() << method << " " << path << " never succeeded";
    return {};
}

TEST(EmulatorFaults, WellBehavedClientSurvivesA429StormAndA403Window) {
    TempDir dir;
    boost::asio::io_context io;
    EmulatorProcess emulator(
        dir.path(), {"--fault-429-rate", "0.4", "--fault-403-first", "4", "--fault-seed", "7"});
    SdkClient sdk(io, dir.path() / "ca.pem", emulator.base_url());
    auto r = sdk.call("GET", "/sandboxes");
    EXPECT_EQ(r.status, 403);
    EXPECT_TRUE(r.body.empty());
    std::set<std::string> ids;
    for (int i = 0; i < 3; ++i) {
        r = well_behaved(sdk, "PUT", "/sandboxes",
                         R"({"sourcesRef":{"diskImage":{"name":"host","isPublic":true}},)"
                         R"("labels":{"scope":"storm"}})");
        ASSERT_TRUE(r.status == 200 || r.status == 201) << r.body;
        ids.insert(std::string(SdkClient::body(r).at("id").as_string()));
    }
    for (const auto& id : ids) {
        for (int i = 0; i < 100; ++i) {
            r = well_behaved(sdk, "GET", "/sandboxes/" + id);
            if (SdkClient::body(r).at("state").as_string() == "Running") {
                break;
            }
            std::this_thread::sleep_for(100ms);
        }
        r = well_behaved(sdk, "POST", "/sandboxes/" + id + "/executeShellCommand",
                         R"({"command":"echo ok"})");
        EXPECT_EQ(SdkClient::body(r).at("stdout").as_string(), "ok\n");
    }
    // Every sandbox is accounted for: exactly the three created, none duplicated or lost.
    r = well_behaved(sdk, "GET", "/sandboxes", {}, "labels=scope%3Dstorm");
    std::set<std::string> listed;
    const auto listing = SdkClient::body(r);
    for (const auto& s : listing.at("value").as_array()) {
        listed.insert(std::string(s.at("id").as_string()));
    }
    EXPECT_EQ(listed, ids);
    for (const auto& id : ids) {
        well_behaved(sdk, "DELETE", "/sandboxes/" + id);
    }
    for (int i = 0; i < 100; ++i) {
        r = well_behaved(sdk, "GET", "/sandboxes", {}, "labels=scope%3Dstorm");
        if (SdkClient::body(r).at("value").as_array().empty()) {
            break;
        }
        std::this_thread::sleep_for(100ms);
    }
    EXPECT_TRUE(SdkClient::body(r).at("value").as_array().empty());
    // The emulator answers health checks throughout: it never deadlocked.
    EXPECT_EQ(sdk.raw("GET", "/healthz", {}, "", false).status, 200);
}

TEST(EmulatorFaults, TokenFlagRefusesOtherTokens) {
    TempDir dir;
    boost::asio::io_context io;
    EmulatorProcess emulator(dir.path(), {"--token", "right"});
    SdkClient wrong(io, dir.path() / "ca.pem", emulator.base_url(), "wrong");
    EXPECT_EQ(wrong.call("GET", "/sandboxes").status, 401);
    SdkClient right(io, dir.path() / "ca.pem", emulator.base_url(), "right");
    EXPECT_EQ(right.call("GET", "/sandboxes").status, 200);
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
