// The emulator's HTTP face without a socket: the fault and metrics wrappers around any handler.
// They prove that faults touch only data-plane exchanges and stop them before the handler runs,
// that a dropped answer is still stamped and counted, and that the sandbox gauge is listed by the
// state's wire name.
#include <gtest/gtest.h>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <memory>
#include <string>

#include "fault_injector.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "refusal.hpp"
#include "request_metrics.hpp"
#include "routing.hpp"
#include "wire_format.hpp"

namespace maf_sandbox::emulator {
namespace {

namespace json = boost::json;
using net::HttpResponse;

const std::string kPrefix =
    "/subscriptions/s/resourceGroups/g/sandboxGroups/n/sandboxes?api-version=2026-02-01-preview";

Exchange exchange_for(const std::string& method, const std::string& target) {
    Exchange exchange;
    exchange.request.method = method;
    exchange.request.target = target;
    exchange.route = route_request(method, target);
    exchange.request_id = "test-request";
    return exchange;
}

// The innermost handler of these tests: answers 200 and counts how often it ran.
struct CountingHandler {
    std::shared_ptr<int> calls = std::make_shared<int>(0);
    Handler handler() const {
        return [calls = calls](const Exchange&) -> Task<HttpResponse> {
            ++*calls;
            co_return json_response(200, json::object{{"ok", true}});
        };
    }
};

std::shared_ptr<spdlog::logger> quiet() {
    return std::make_shared<spdlog::logger>("wrappers-test",
                                            std::make_shared<spdlog::sinks::null_sink_mt>());
}

TEST(HandlerWrappers, FaultsStopDataPlaneExchangesBeforeTheHandlerAndLeaveOthersAlone) {
    boost::asio::io_context io;
    FaultOptions faults;
    faults.first_403 = 1;
    auto injector = std::make_shared<FaultInjector>(faults);
    CountingHandler inner;
    const auto handler = with_faults(inner.handler(), injector, io.get_executor());

    const auto list = exchange_for("GET", kPrefix);
    ASSERT_TRUE(list.route.data_plane);
    EXPECT_EQ(run_blocking(io, handler(list)).status, 403);
    EXPECT_EQ(*inner.calls, 0);
    EXPECT_EQ(run_blocking(io, handler(list)).status, 200);
    EXPECT_EQ(*inner.calls, 1);

    injector->replace(json::object{{"rate5xx", 1}});
    const auto health = exchange_for("GET", "/healthz");
    EXPECT_EQ(run_blocking(io, handler(health)).status, 200);
    const auto answer = run_blocking(io, handler(list));
    EXPECT_EQ(answer.status, 503);
    EXPECT_EQ(answer.headers.get("Content-Type"), "application/problem+json");
    EXPECT_EQ(*inner.calls, 2);
}

TEST(HandlerWrappers, AFaultLimitedToOneOperationSparesTheOthers) {
    boost::asio::io_context io;
    FaultOptions faults;
    faults.rate_429 = 1;
    faults.only = "PUT /sandboxes";
    CountingHandler inner;
    const auto handler =
        with_faults(inner.handler(), std::make_shared<FaultInjector>(faults), io.get_executor());
    const auto throttled = run_blocking(io, handler(exchange_for("PUT", kPrefix)));
    EXPECT_EQ(throttled.status, 429);
    EXPECT_EQ(throttled.headers.get("Retry-After"), "1");
    EXPECT_EQ(run_blocking(io, handler(exchange_for("GET", kPrefix))).status, 200);
    EXPECT_EQ(FaultInjector::operation_key("POST", {"sandboxes", "abc", "executeShellCommand"}),
              "POST /sandboxes/{id}/executeShellCommand");
    EXPECT_EQ(FaultInjector::operation_key("GET", {"diskimages", "public", "ubuntu"}),
              "GET /diskimages/public/ubuntu");
}

TEST(HandlerWrappers, ADroppedAnswerIsStampedAndCountedBeforeTheConnectionDrops) {
    boost::asio::io_context io;
    FaultOptions faults;
    faults.drop_rate = 1;
    auto metrics = std::make_shared<RequestMetrics>();
    CountingHandler inner;
    const auto handler = with_metrics(
        with_faults(inner.handler(), std::make_shared<FaultInjector>(faults), io.get_executor()),
        metrics, quiet(), "emulator-identity");
    try {
        run_blocking(io, handler(exchange_for("GET", kPrefix)));
        ADD_FAILURE() << "the connection was not dropped";
    } catch (const net::AbortConnection& dropped) {
        EXPECT_EQ(dropped.partial().status, 200);
        EXPECT_EQ(dropped.partial().headers.get("x-acas-emulator"), "emulator-identity");
        EXPECT_EQ(dropped.partial().headers.get("x-ms-request-id"), "test-request");
    }
    EXPECT_EQ(*inner.calls, 1);
    const auto text = metrics->render({{SandboxState::running, 2}, {SandboxState::deleting, 1}});
    EXPECT_NE(text.find("acas_emulator_requests_total{method=\"GET\",route=\"sandboxes.list\","
                        "status=\"200\"} 1"),
              std::string::npos)
        << text;
    // By name: Deleting before Running, though the enum has them the other way round.
    const auto deleting = text.find("acas_emulator_sandboxes{state=\"Deleting\"} 1");
    const auto running = text.find("acas_emulator_sandboxes{state=\"Running\"} 2");
    ASSERT_NE(deleting, std::string::npos) << text;
    ASSERT_NE(running, std::string::npos) << text;
    EXPECT_LT(deleting, running);
}

TEST(HandlerWrappers, EveryRefusalBecomesTheServicesProblemAnswer) {
    boost::asio::io_context io;
    const Handler refusing = [](const Exchange&) -> Task<HttpResponse> {
        throw sandbox_not_found();
        co_return HttpResponse{};
    };
    const auto answer =
        run_blocking(io, with_refusals(refusing, quiet())(exchange_for("GET", kPrefix)));
    EXPECT_EQ(answer.status, 404);
    EXPECT_EQ(answer.headers.get("Content-Type"), "application/problem+json");
    const auto body = boost::json::parse(answer.body).as_object();
    EXPECT_EQ(body.at("title"), "SandboxNotFound");
    EXPECT_EQ(body.at("errorCode"), 1);

    const Handler failing = [](const Exchange&) -> Task<HttpResponse> {
        throw std::runtime_error("/host/path/that/must/not/leak");
        co_return HttpResponse{};
    };
    const auto hidden =
        run_blocking(io, with_refusals(failing, quiet())(exchange_for("GET", kPrefix)));
    EXPECT_EQ(hidden.status, 500);
    EXPECT_EQ(hidden.body.find("/host/path"), std::string::npos);
    EXPECT_NE(hidden.body.find("test-request"), std::string::npos);
}

}  // namespace
}  // namespace maf_sandbox::emulator
