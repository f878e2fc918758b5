// The REST client against a scripted loopback HTTPS server: retries, backoff and Retry-After,
// the 403 window, the never-resent exec, nextLink validation, the emulator header and the
// request shape. These rules are easiest to prove against a server that misbehaves on cue.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/json/parse.hpp>
#include <mutex>

#include "loopback.hpp"
#include "maf_sandbox/acas/client.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/azure/credentials.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;
using maf_sandbox::testing::LoopbackServer;
using maf_sandbox::testing::TempDir;

using Script = std::function<net::HttpResponse(const net::HttpRequest&, int call)>;

net::HttpResponse answer(int status, std::string body = "{}",
                         std::vector<std::pair<std::string, std::string>> headers = {}) {
    net::HttpResponse r;
    r.status = status;
    r.headers.set("Content-Type", "application/json");
    for (auto& [k, v] : headers)
        r.headers.set(k, v);
    r.body = std::move(body);
    return r;
}

const char* kSandbox = R"({"id":"sb-1","state":"Running","labels":{"scope":"s"}})";

struct Fake {
    explicit Fake(Script script)
        : script_(std::move(script)),
          server_(std::make_unique<LoopbackServer>(
              [this](net::HttpRequest request) -> Task<net::HttpResponse> {
                  int call;
                  {
                      std::lock_guard lock(mutex_);
                      requests_.push_back(request);
                      call = static_cast<int>(requests_.size());
                  }
                  if (abort_on_call_ == call)
                      throw net::AbortConnection(answer(200, "{\"stdout\":"));
                  co_return script_(request, call);
              },
              true)) {}

    AcasClientOptions options(bool emulator = false) {
        AcasClientOptions o;
        o.endpoint = server_->origin();
        o.subscription_id = "sub";
        o.resource_group = "rg";
        o.sandbox_group = "grp";
        o.ca_file = dir_.write("ca.pem", server_->ca_pem());
        o.credential = azure::make_static_token_credential("tok-secret");
        o.emulator = emulator;
        o.retry.initial_backoff = Seconds{0.01};
        o.retry.max_backoff = Seconds{0.05};
        return o;
    }
    std::vector<net::HttpRequest> requests() {
        std::lock_guard lock(mutex_);
        return requests_;
    }
    std::string origin() const { return server_->origin(); }
    int abort_on_call_ = 0;

  private:
    Script script_;
    std::mutex mutex_;
    std::vector<net::HttpRequest> requests_;
    TempDir dir_;
    std::unique_ptr<LoopbackServer> server_;
};

TEST(AcasClient, SendsTheApiVersionRequestIdUserAgentAndBearerToken) {
    Fake fake([](const net::HttpRequest&, int) { return answer(200, kSandbox); });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    const auto info = drive(io, client.get_sandbox("sb-1", deadline_after(Seconds{10})));
    ASSERT_TRUE(info);
    EXPECT_EQ(info->state, "Running");
    const auto request = fake.requests().at(0);
    EXPECT_EQ(request.target,
              "/subscriptions/sub/resourceGroups/rg/sandboxGroups/grp/sandboxes/"
              "sb-1?api-version=2026-02-01-preview");
    EXPECT_EQ(request.headers.get("Authorization"), "Bearer tok-secret");
    EXPECT_EQ(request.headers.get("x-ms-client-request-id")->size(), 36u);
    EXPECT_EQ(request.headers.get("User-Agent"), std::string(kUserAgent));
}

TEST(AcasClient, RetriesAnIdempotentRequestThrough429And5xxKeepingOneRequestId) {
    Fake fake([](const net::HttpRequest&, int call) {
        switch (call) {
            case 1:
                return answer(503);
            case 2:
                return answer(429, "{}", {{"retry-after-ms", "20"}});
            case 3:
                return answer(500);
            case 4:
                return answer(408);
            default:
                return answer(200, kSandbox);
        }
    });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    EXPECT_TRUE(drive(io, client.get_sandbox("sb-1", deadline_after(Seconds{10}))));
    const auto requests = fake.requests();
    ASSERT_EQ(requests.size(), 5u);
    EXPECT_EQ(requests[0].headers.get("x-ms-client-request-id"),
              requests[4].headers.get("x-ms-client-request-id"));
    EXPECT_EQ(client.stats().retries, 4u);
}

TEST(AcasClient, AnUntrustedCertificateIsNeverRetriedAndItsMessageNamesTheProblemAndTheFix) {
    Fake fake([](const net::HttpRequest&, int) { return answer(200, kSandbox); });
    boost::asio::io_context io;
    auto options = fake.options();
    options.ca_file.reset();  // the forgotten CA file: only the system store, which lacks ours
    AcasClient client(io.get_executor(), options);
    try {
        drive(io, client.get_sandbox("sb-1", deadline_after(Seconds{20})));
        FAIL() << "an unknown CA was trusted";
    } catch (const AcasServiceUnreachable& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("TLS certificate was not accepted: self-signed certificate in "
                               "certificate chain"),
                  std::string::npos)
            << message;
        EXPECT_NE(message.find("--ca-file FILE (ACAS_SANDBOX_CA_FILE"), std::string::npos)
            << message;
        EXPECT_EQ(message.find("check the network"), std::string::npos) << message;
    }
    EXPECT_EQ(client.stats().requests, 1u);
    EXPECT_EQ(client.stats().retries, 0u);
    EXPECT_TRUE(fake.requests().empty());
}

TEST(AcasClient, RetriesAtLeastTenTimesThenGivesUp) {
    Fake fake([](const net::HttpRequest&, int) { return answer(502); });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    EXPECT_THROW(drive(io, client.get_sandbox("sb-1", deadline_after(Seconds{20}))),
                 AcasServiceError);
    EXPECT_GE(fake.requests().size(), 11u);
}

TEST(AcasClient, HonoursRetryAfterSeconds) {
    Fake fake([](const net::HttpRequest&, int call) {
        return call == 1 ? answer(503, "{}", {{"Retry-After", "1"}}) : answer(200, kSandbox);
    });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    const auto started = SteadyClock::now();
    drive(io, client.get_sandbox("sb-1", deadline_after(Seconds{10})));
    EXPECT_GE(SteadyClock::now() - started, std::chrono::milliseconds(950));
}

TEST(AcasClient, A403WindowCoversRbacPropagationAndThenRefuses) {
    Fake healing([](const net::HttpRequest&, int call) {
        return call <= 3 ? answer(403, "") : answer(200, kSandbox);
    });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), healing.options());
    EXPECT_TRUE(drive(io, client.get_sandbox("sb-1", deadline_after(Seconds{10}))));

    Fake forbidden([](const net::HttpRequest&, int) { return answer(403, ""); });
    auto options = forbidden.options();
    options.retry.forbidden_window = Seconds{0.3};
    AcasClient refused(io.get_executor(), options);
    EXPECT_THROW(drive(io, refused.get_sandbox("sb-1", deadline_after(Seconds{10}))),
                 AcasAuthorizationError);
    EXPECT_GE(forbidden.requests().size(), 2u);
}

TEST(AcasClient, A401IsNeverRetried) {
    Fake fake(
        [](const net::HttpRequest&, int) { return answer(401, R"({"title":"Unauthorized"})"); });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    EXPECT_THROW(drive(io, client.get_sandbox("sb-1", deadline_after(Seconds{10}))),
                 AcasAuthorizationError);
    EXPECT_EQ(fake.requests().size(), 1u);
}

TEST(AcasClient, A401QuotesTheServicesReasonButNoLongWordItEchoes) {
    const std::string echoed(120, 'e');
    Fake fake([&](const net::HttpRequest&, int) {
        return answer(401, R"({"title":"InvalidAuthenticationToken","detail":"The access token )"
                           R"(has expired. Token: )" +
                               echoed + R"("})");
    });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    try {
        drive(io, client.get_sandbox("sb-1", deadline_after(Seconds{10})));
        FAIL() << "a 401 must throw";
    } catch (const AcasAuthorizationError& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("HTTP 401: The access token has expired."), std::string::npos)
            << message;
        EXPECT_EQ(message.find(echoed), std::string::npos) << message;
    }
}

TEST(AcasClient, AnExecGettingA5xxIsNeverResent) {
    Fake fake([](const net::HttpRequest&, int) { return answer(503); });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    EXPECT_THROW(
        drive(io, client.exec("sb-1", "true", std::nullopt, deadline_after(Seconds{10}), 4096)),
        AcasRequestOutcomeUnknown);
    EXPECT_EQ(fake.requests().size(), 1u);
}

TEST(AcasClient, AnExecWhoseConnectionDropsInFlightIsNeverResent) {
    Fake fake([](const net::HttpRequest&, int) {
        return answer(200, R"({"stdout":"","stderr":"","exitCode":0})");
    });
    fake.abort_on_call_ = 1;
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    EXPECT_THROW(
        drive(io, client.exec("sb-1", "true", std::nullopt, deadline_after(Seconds{10}), 4096)),
        AcasRequestOutcomeUnknown);
    EXPECT_EQ(fake.requests().size(), 1u);
}

TEST(AcasClient, AnExecThrottledWithRetryAfterIsWaitedOutAndSentAgain) {
    Fake fake([](const net::HttpRequest&, int call) {
        return call == 1 ? answer(429, "{}", {{"Retry-After", "0"}})
                         : answer(200, R"({"stdout":"hi","stderr":"","exitCode":3})");
    });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    const auto result = drive(
        io, client.exec("sb-1", "echo hi", std::string("/w"), deadline_after(Seconds{10}), 4096));
    EXPECT_EQ(result.stdout_text, "hi");
    EXPECT_EQ(result.exit_code, 3);
    ASSERT_EQ(fake.requests().size(), 2u);
    const auto body = boost::json::parse(fake.requests()[1].body).as_object();
    EXPECT_EQ(body.at("command").as_string(), "echo hi");
    EXPECT_EQ(body.at("workingDirectory").as_string(), "/w");
}

TEST(AcasClient, AThrottleOutlastingTheDeadlineLeavesNothingInFlight) {
    Fake fake([](const net::HttpRequest&, int) {
        return answer(429, "{}", {{"Retry-After", "30"}});
    });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    EXPECT_THROW(
        drive(io, client.exec("sb-1", "true", std::nullopt, deadline_after(Seconds{1}), 4096)),
        AcasThrottled);
    EXPECT_EQ(fake.requests().size(), 1u);
}

TEST(AcasClient, AnExecAnswerOverItsBoundIsRefused) {
    Fake fake([](const net::HttpRequest&, int) {
        return answer(
            200, R"({"stdout":")" + std::string(10000, 'x') + R"(","stderr":"","exitCode":0})");
    });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    EXPECT_THROW(
        drive(io, client.exec("sb-1", "true", std::nullopt, deadline_after(Seconds{10}), 2048)),
        AcasServiceError);
}

TEST(AcasClient, FollowsASameHostNextLinkAndRefusesAForeignOne) {
    std::string origin;
    Fake fake([&origin](const net::HttpRequest& request, int) {
        if (request.target.find("page=2") != std::string::npos) {
            return answer(200, R"({"value":[{"id":"b","labels":{"scope":"s"}}]})");
        }
        return answer(200, R"({"value":[{"id":"a","labels":{"scope":"s"}}],"nextLink":")" + origin +
                               R"(/next?page=2"})");
    });
    origin = fake.origin();
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    const auto listed =
        drive(io, client.list_sandboxes({{"scope", "s"}}, deadline_after(Seconds{10})));
    ASSERT_EQ(listed.size(), 2u);
    EXPECT_NE(fake.requests()[0].target.find("labels=scope%3Ds"), std::string::npos);

    for (const std::string& foreign :
         std::vector<std::string>{"https://evil.example.com/next", "http://127.0.0.1:1/next"}) {
        Fake other([foreign](const net::HttpRequest&, int) {
            return answer(200, R"({"value":[],"nextLink":")" + foreign + R"("})");
        });
        AcasClient c(io.get_executor(), other.options());
        EXPECT_THROW(drive(io, c.list_sandboxes({}, deadline_after(Seconds{10}))),
                     AcasServiceError);
        EXPECT_EQ(other.requests().size(), 1u);
    }
}

TEST(AcasClient, RefusesTheEmulatorHeaderOutsideEmulatorModeAndRecordsItsRungInside) {
    Fake fake([](const net::HttpRequest&, int) {
        return answer(200, kSandbox, {{"x-acas-emulator", "0.1.0; isolation=container"}});
    });
    boost::asio::io_context io;
    AcasClient strict(io.get_executor(), fake.options(false));
    EXPECT_THROW(drive(io, strict.get_sandbox("sb-1", deadline_after(Seconds{10}))),
                 AcasEmulatorMismatch);
    AcasClient emulated(io.get_executor(), fake.options(true));
    drive(io, emulated.get_sandbox("sb-1", deadline_after(Seconds{10})));
    EXPECT_EQ(emulated.emulator_rung(), Isolation::container);
}

TEST(AcasClient, CreatesWithLabelsClosedOrAllowlistEgressAndSuspendPolicy) {
    Fake fake([](const net::HttpRequest&, int) {
        return answer(201, R"({"id":"new","state":"Creating"})");
    });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    CreateSandboxRequest request;
    request.prebuilt_name = "python-3.13";
    request.labels = {{"scope", "s"}, {"kind", "k"}};
    request.allow_hosts = {"mcr.microsoft.com"};
    EXPECT_EQ(drive(io, client.create_sandbox(request, deadline_after(Seconds{10}))).id, "new");
    const auto sent = fake.requests().at(0);
    EXPECT_EQ(sent.method, "PUT");
    const auto body = boost::json::parse(sent.body).as_object();
    EXPECT_EQ(body.at("sourcesRef").at("diskImage").at("name").as_string(), "python-3.13");
    EXPECT_EQ(body.at("sourcesRef").at("diskImage").at("isPublic").as_bool(), true);
    EXPECT_EQ(body.at("labels").at("kind").as_string(), "k");
    EXPECT_EQ(body.at("egressPolicy").at("defaultAction").as_string(), "Deny");
    EXPECT_EQ(body.at("egressPolicy").at("trafficInspection").as_string(), "Full");
    EXPECT_EQ(body.at("egressPolicy").at("hostRules").at(0).at("pattern").as_string(),
              "mcr.microsoft.com");
    EXPECT_EQ(body.at("lifecycle").at("autoSuspendPolicy").at("mode").as_string(), "Memory");
}

TEST(AcasClient, ACreateIsNotResentAfterA5xx) {
    Fake fake([](const net::HttpRequest&, int) { return answer(500); });
    boost::asio::io_context io;
    AcasClient client(io.get_executor(), fake.options());
    CreateSandboxRequest request;
    request.prebuilt_name = "ubuntu";
    EXPECT_THROW(drive(io, client.create_sandbox(request, deadline_after(Seconds{10}))),
                 AcasServiceError);
    EXPECT_EQ(fake.requests().size(), 1u);
}

TEST(AcasClient, RefusesEndpointsAndIdsThatCannotAddressTheServiceSafely) {
    boost::asio::io_context io;
    AcasClientOptions o;
    o.credential = azure::make_static_token_credential("t");
    o.subscription_id = "s";
    o.resource_group = "r";
    o.sandbox_group = "g";
    o.endpoint = "http://management.eastus.azuredevcompute.io";
    EXPECT_THROW(AcasClient(io.get_executor(), o), InvalidArgument);
    o.endpoint = "https://management.eastus.azuredevcompute.io/";
    EXPECT_THROW(AcasClient(io.get_executor(), o), InvalidArgument);
    o.endpoint = "https://management.eastus.azuredevcompute.io";
    for (const std::string& bad :
         std::vector<std::string>{"", "a/b", "a\\b", "..", std::string("a\0b", 3)}) {
        o.sandbox_group = bad;
        EXPECT_THROW(AcasClient(io.get_executor(), o), InvalidArgument) << bad;
    }
}

}  // namespace
}  // namespace maf_sandbox::acas
