// The emulator's SandboxService without HTTP: typed requests in, typed answers or Refusals out,
// over the real local runtime engine. These prove the state machine's transitions and refusals
// directly (the HTTP tests see them only through the wire), and the state's one wire table.
#include <gtest/gtest.h>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "refusal.hpp"
#include "sandbox_service.hpp"
#include "sandbox_state.hpp"

namespace maf_sandbox::emulator {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

const std::string kGroup =
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourcegroups/rg-test/"
    "sandboxgroups/service-test";

SandboxListing listing(const std::string& group) {
    SandboxListing all;
    all.group = group;
    all.page_size = 1000;
    return all;
}

TEST(SandboxStateWire, EveryStateHasOneSpellingThatReadsBackAsItself) {
    std::set<std::string_view> names;
    for (const auto state : kSandboxStates) {
        const auto name = wire_name(state);
        EXPECT_TRUE(names.insert(name).second) << name << " spells two states";
        EXPECT_EQ(sandbox_state_from_wire(name), state) << name;
    }
    EXPECT_EQ(names, (std::set<std::string_view>{"Creating", "Running", "Stopped", "Suspended",
                                                 "Deleting", "Failed"}));
}

TEST(SandboxStateWire, OtherSpellingsNameNoState) {
    for (const char* other : {"", "running", "RUNNING", "Running ", "Stopping", "Deleted"}) {
        EXPECT_EQ(sandbox_state_from_wire(other), std::nullopt) << other;
    }
    EXPECT_TRUE(is_frozen(SandboxState::stopped));
    EXPECT_TRUE(is_frozen(SandboxState::suspended));
    EXPECT_FALSE(is_frozen(SandboxState::running));
}

// A service on its own io_context thread, over the local runtime in a private directory.
class SandboxServiceTest : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string pattern = "/tmp/maf-service-XXXXXX";
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        dir_ = pattern;
        ServiceOptions options;
        options.state_dir = dir_;
        // Long enough that a loaded machine still sees Deleting right after the delete.
        options.deleting_retention = 1500ms;
        options.worker_threads = 4;
        auto logger = std::make_shared<spdlog::logger>(
            "service-test", std::make_shared<spdlog::sinks::null_sink_mt>());
        service_ = std::make_shared<SandboxService>(io_.get_executor(), std::move(options), logger,
                                                    make_runtime_engine(dir_ / "runtime"));
        service_->start();
        thread_ = std::thread([this] { io_.run(); });
    }

    void TearDown() override {
        if (service_) {
            for (const auto& doc : service_->list(listing(kGroup)).sandboxes) {
                try {
                    service_->remove(doc.id);
                } catch (const Refusal&) {
                }
            }
            // Deletions run on the loop: wait until every sandbox is forgotten.
            wait_for([&] { return service_->list(listing(kGroup)).matching == 0; });
            service_->stop();
        }
        guard_.reset();
        io_.stop();
        if (thread_.joinable()) {
            thread_.join();
        }
        service_.reset();
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
    }

    // Runs a service coroutine on the loop and waits for its answer (or its exception).
    template <typename T>
    T await(std::function<Task<T>()> call) {
        return boost::asio::co_spawn(io_, call(), boost::asio::use_future).get();
    }

    static bool wait_for(const std::function<bool()>& condition,
                         std::chrono::milliseconds limit = 60s) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (std::chrono::steady_clock::now() < deadline) {
            if (condition()) {
                return true;
            }
            std::this_thread::sleep_for(20ms);
        }
        return condition();
    }

    NewSandbox host_sandbox() const {
        NewSandbox request;
        request.group = kGroup;
        request.sources_ref = json::object{{"diskImage", json::object{{"name", "host"}}}};
        request.disk_image_name = "host";
        request.labels = {{"test", "service"}};
        return request;
    }

    SandboxDoc running_sandbox() {
        const auto created = service_->create(host_sandbox());
        EXPECT_EQ(created.state, SandboxState::creating);
        EXPECT_TRUE(
            wait_for([&] { return service_->get(created.id).state != SandboxState::creating; }));
        auto doc = service_->get(created.id);
        EXPECT_EQ(doc.state, SandboxState::running) << doc.failure;
        return doc;
    }

    // The Refusal `call` throws; fails the test when it throws none.
    template <typename F>
    static Refusal refusal_of(F&& call) {
        try {
            call();
        } catch (const Refusal& refusal) {
            return refusal;
        }
        ADD_FAILURE() << "no refusal";
        return Refusal{0, "", ""};
    }

    boost::asio::io_context io_;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_{
        io_.get_executor()};
    std::filesystem::path dir_;
    std::shared_ptr<SandboxService> service_;
    std::thread thread_;
};

TEST_F(SandboxServiceTest, AnUnknownSandboxIsRefusedAsTheServiceRefusesIt) {
    const auto refusal = refusal_of([&] { service_->get("no-such-sandbox"); });
    EXPECT_EQ(refusal.status, 404);
    EXPECT_EQ(refusal.code, "SandboxNotFound");
    EXPECT_EQ(refusal.error_code, 1);  // the service's errorCode here, not the status
    EXPECT_EQ(refusal_of([&] { service_->remove("no-such-sandbox"); }).status, 404);
}

TEST_F(SandboxServiceTest, CreateRunsTheSandboxAndStopResumeFollowTheStateMachine) {
    const auto doc = running_sandbox();
    const std::string id = doc.id;
    EXPECT_FALSE(doc.handle.empty());

    const auto stopped = await<SandboxDoc>([&] { return service_->stop_sandbox(id); });
    EXPECT_EQ(stopped.state, SandboxState::stopped);
    EXPECT_EQ(stopped.stopped_reason, "UserStopped");

    // Only a Running sandbox stops, and only a Running one runs commands.
    auto refusal =
        refusal_of([&] { await<SandboxDoc>([&] { return service_->stop_sandbox(id); }); });
    EXPECT_EQ(refusal.status, 409);
    EXPECT_EQ(refusal.code, "SandboxNotRunning");
    refusal = refusal_of([&] {
        await<ShellResult>([&] { return service_->exec(id, ShellCommand{"true", ""}); });
    });
    EXPECT_EQ(refusal.code, "SandboxNotRunning");
    refusal = refusal_of([&] { service_->file_target(id); });
    EXPECT_EQ(refusal.status, 409);

    const auto resumed = await<SandboxDoc>([&] { return service_->resume_sandbox(id); });
    EXPECT_EQ(resumed.state, SandboxState::running);
    // Resuming a Running sandbox is refused naming the state it is in.
    refusal = refusal_of([&] { await<SandboxDoc>([&] { return service_->resume_sandbox(id); }); });
    EXPECT_EQ(refusal.status, 409);
    EXPECT_EQ(refusal.code, "InvalidSandboxState");
    EXPECT_NE(refusal.message.find("Current state: Running"), std::string::npos) << refusal.message;

    const auto result = await<ShellResult>([&] {
        return service_->exec(id, ShellCommand{"echo hi; exit 3", ""});
    });
    EXPECT_EQ(result.stdout_text, "hi\n");
    EXPECT_EQ(result.exit_code, 3);
}

TEST_F(SandboxServiceTest, ADeletedSandboxIsDeletingForItsRetentionThenGoneAndRefusesPolicies) {
    const auto doc = running_sandbox();
    const std::string id = doc.id;
    service_->remove(id);
    EXPECT_EQ(service_->get(id).state, SandboxState::deleting);
    EXPECT_EQ(service_->count_by_state().at(SandboxState::deleting), 1);
    service_->remove(id);  // a repeated delete is accepted while it is Deleting
    const auto refusal = refusal_of([&] { service_->set_lifecycle(id, json::object{}); });
    EXPECT_EQ(refusal.status, 409);
    EXPECT_EQ(refusal.code, "SandboxNotRunning");
    EXPECT_TRUE(wait_for([&] {
        try {
            service_->get(id);
            return false;
        } catch (const Refusal& gone) {
            return gone.status == 404;
        }
    }));
    EXPECT_EQ(service_->count_by_state().at(SandboxState::deleting), 0);
}

TEST_F(SandboxServiceTest, ASandboxOfAnotherGroupDoesNotExistThere) {
    const auto doc = running_sandbox();
    EXPECT_NO_THROW(service_->check_visible(kGroup, doc.id));
    const auto refusal = refusal_of([&] { service_->check_visible(kGroup + "-other", doc.id); });
    EXPECT_EQ(refusal.status, 404);
    EXPECT_EQ(service_->list(listing(kGroup + "-other")).matching, 0u);
    auto labelled = listing(kGroup);
    labelled.selector["test"] = "service";
    EXPECT_EQ(service_->list(labelled).matching, 1u);
    labelled.selector["test"] = "other";
    EXPECT_EQ(service_->list(labelled).matching, 0u);
}

TEST_F(SandboxServiceTest, ASandboxFromADiskImageThatIsNotReadyOrUnknownIsRefused) {
    auto request = host_sandbox();
    request.disk_image_name.clear();
    request.disk_image_id = "00000000-0000-0000-0000-000000000000";
    auto refusal = refusal_of([&] { service_->create(request); });
    EXPECT_EQ(refusal.status, 404);
    EXPECT_EQ(refusal.code, "DiskImageNotFound");

    // A base the registry stand-in does not hold fails its import.
    const auto image = service_->create_disk_image(NewDiskImage{kGroup, "nowhere/none:1", "", {}});
    EXPECT_EQ(image.state, DiskImageState::pending);
    ASSERT_TRUE(wait_for(
        [&] { return service_->disk_image(kGroup, image.id).state != DiskImageState::pending; }));
    EXPECT_EQ(service_->disk_image(kGroup, image.id).state, DiskImageState::failed);
    request.disk_image_id = image.id;
    refusal = refusal_of([&] { service_->create(request); });
    EXPECT_EQ(refusal.status, 409);
    EXPECT_EQ(refusal.code, "DiskImageNotReady");
    // Another group has no such image.
    EXPECT_EQ(refusal_of([&] { service_->disk_image(kGroup + "-other", image.id); }).status, 404);
    EXPECT_TRUE(service_->list(listing(kGroup)).sandboxes.empty());
}

TEST_F(SandboxServiceTest, AnEgressPolicyTheRuntimeCannotEnforceIsRefusedBeforeAnythingRuns) {
    auto request = host_sandbox();
    request.egress_policy = json::object{
        {"defaultAction", "Allow"},
        {"hostRules", json::array{json::object{{"pattern", "example.com"}, {"action", "Deny"}}}}};
    const auto refusal = refusal_of([&] { service_->create(request); });
    EXPECT_EQ(refusal.status, 400);
    EXPECT_EQ(refusal.code, "EgressPolicyNotSupported");
    EXPECT_EQ(service_->list(listing(kGroup)).matching, 0u);
}

}  // namespace
}  // namespace maf_sandbox::emulator
