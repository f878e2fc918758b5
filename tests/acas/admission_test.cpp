// Cleanup admission and the held record (README "Cleanup admission also applies to direct backend
// callers" and the egress paragraph after it): acquire is refused while a retained deletion keeps
// failing and while a scope purge runs, other conversations stay available; acquire for one key
// and kind is serialised across event loops while other keys and kinds never wait for it; a failed
// resume keeps the held record until it is disposed; direct cancellation of an exec disposes the
// sandbox.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <barrier>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <thread>

#include "harness.hpp"
#include "maf_sandbox/azure/credentials.hpp"
#include "polling.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;
using maf_sandbox::testing::poll_until_async;
namespace asio = boost::asio;
using namespace std::chrono_literals;

net::HttpResponse refusal(int status, const std::string& title) {
    net::HttpResponse response;
    response.status = status;
    response.headers.set("Content-Type", "application/problem+json");
    response.body =
        boost::json::serialize(boost::json::object{{"title", title}, {"status", status}});
    return response;
}

bool is_sandbox_delete(const net::HttpRequest& request, const std::string& path) {
    return request.method == "DELETE" && path.find("/sandboxes/") != std::string::npos &&
           path.find("/files") == std::string::npos;
}

// A host resolver whose first answer waits until `release` (at most 10 s); later ones answer at
// once. The acquire that asked first holds its key and kind's lock meanwhile.
Task<AcasCredentialBinding> first_answer_waits(std::shared_ptr<std::atomic<int>> calls,
                                               std::shared_ptr<std::atomic<bool>> release,
                                               AcasCredentialRequest) {
    if ((*calls)++ == 0) {
        std::function<bool()> released_yet = [release] { return release->load(); };
        const bool released = co_await poll_until_async(std::move(released_yet), 10s);
        EXPECT_TRUE(released);
    }
    AcasCredentialBinding binding;
    binding.authority = "host";
    binding.generation = "1";
    binding.create_credential = [](asio::any_io_executor) {
        return azure::make_static_token_credential("test-token");
    };
    co_return binding;
}

TEST(AcasAdmission, AcquireIsRefusedWhileARetainedDeletionOfItsKeyAndKindKeepsFailing) {
    Harness h;
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec()));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    auto refuse = std::make_shared<std::atomic<bool>>(true);
    h.service.set_fault([refuse](const net::HttpRequest& request,
                                 const std::string& path) -> std::optional<net::HttpResponse> {
        if (*refuse && is_sandbox_delete(request, path))
            return refusal(409, "Conflict");
        return std::nullopt;
    });
    const auto failure = drive(h.io, backend->dispose(kKey, std::string("shell")));
    ASSERT_TRUE(failure);  // retained for retries
    EXPECT_TRUE(h.service.sandbox(id));
    const auto deletes = h.service.count("DELETE", "/sandboxes/" + id);

    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxCleanupPending);
    EXPECT_GT(h.service.count("DELETE", "/sandboxes/" + id), deletes);  // it retried first
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);                // and created nothing
    // Another key is not held back by this one's retained deletion.
    drive(h.io, backend->acquire(SandboxKey{"scope-1", "thread-1", "agent-2", ""}, h.spec()));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);

    *refuse = false;  // the service answers again: the retry succeeds and acquire creates anew
    drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_FALSE(h.service.sandbox(id));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 3u);
    EXPECT_NE(*backend->held_sandbox_id(kKey, "shell"), id);
}

TEST(AcasAdmission, DisposeWithoutAKindDeletesEveryKindAndAFailedOneIsRetainedForTheNextDispose) {
    Harness h;
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec()));
    drive(h.io, backend->acquire(kKey, h.spec([](auto& f) { f.kind = "codeact"; })));
    const auto shell = *backend->held_sandbox_id(kKey, "shell");
    const auto codeact = *backend->held_sandbox_id(kKey, "codeact");
    auto refuse = std::make_shared<std::atomic<bool>>(true);
    h.service.set_fault(
        [refuse, codeact](const net::HttpRequest& request,
                          const std::string& path) -> std::optional<net::HttpResponse> {
            if (*refuse && is_sandbox_delete(request, path) && path.ends_with("/" + codeact))
                return refusal(409, "Conflict");
            return std::nullopt;
        });
    const auto failure = drive(h.io, backend->dispose(kKey, std::nullopt));
    ASSERT_TRUE(failure);
    EXPECT_FALSE(h.service.sandbox(shell));
    EXPECT_TRUE(h.service.sandbox(codeact));
    // The failed kind is retained: acquiring it is refused, the other kind is free.
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec([](auto& f) { f.kind = "codeact"; }))),
                 SandboxCleanupPending);
    drive(h.io, backend->acquire(kKey, h.spec()));
    *refuse = false;
    EXPECT_FALSE(drive(h.io, backend->dispose(kKey, std::string("codeact"))));
    EXPECT_FALSE(h.service.sandbox(codeact));
}

TEST(AcasAdmission, AnInvalidatedSandboxMustBeDeletedBeforeItsKeyAndKindGetAnother) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    auto refuse = std::make_shared<std::atomic<bool>>(true);
    h.service.set_fault([refuse](const net::HttpRequest& request,
                                 const std::string& path) -> std::optional<net::HttpResponse> {
        if (path.ends_with("/executeShellCommand"))
            return refusal(503, "Unavailable");  // in flight: the outcome is unknown
        if (*refuse && is_sandbox_delete(request, path))
            return refusal(409, "Conflict");
        return std::nullopt;
    });
    ExecRequest request;
    request.command = std::string("true");
    EXPECT_THROW(drive(h.io, sandbox->exec(request)), AcasRequestOutcomeUnknown);
    EXPECT_TRUE(h.service.sandbox(id));  // invalidated, but its deletion was refused
    h.service.set_fault([refuse](const net::HttpRequest& request,
                                 const std::string& path) -> std::optional<net::HttpResponse> {
        if (*refuse && is_sandbox_delete(request, path))
            return refusal(409, "Conflict");
        return std::nullopt;
    });
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxCleanupPending);
    // The one create since is the replacement the discard made before deleting (it carries the
    // notice to other processes, replacement_notice.hpp); nothing was handed out.
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
    *refuse = false;
    auto next = drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_FALSE(h.service.sandbox(id));
    // The acquire adopted that replacement instead of creating a third sandbox, and says so.
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
    ASSERT_TRUE(next->replaced().has_value());
    EXPECT_EQ(next->replaced()->previous_id, id);
}

TEST(AcasAdmission, AnActivePurgeRefusesAcquiresForItsConversationOnlyUntilItFinishes) {
    Harness h;
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec()));
    // The purge's DELETE is slow, so the acquires below run while it is active.
    auto deleting = std::make_shared<std::atomic<bool>>(false);
    auto release = std::make_shared<std::atomic<bool>>(false);
    h.service.set_fault(
        [deleting, release](const net::HttpRequest& request,
                            const std::string& path) -> std::optional<net::HttpResponse> {
            if (is_sandbox_delete(request, path) && !*deleting) {
                *deleting = true;
                for (int i = 0; i < 2000 && !*release; ++i)  // held until the test saw the refusal
                    std::this_thread::sleep_for(5ms);
            }
            return std::nullopt;
        });
    ScopePurge purge;
    bool refused_during_purge = false;
    auto both = [&]() -> Task<void> {
        using namespace asio::experimental::awaitable_operators;
        auto purging = [&]() -> Task<void> {
            purge = co_await backend->dispose_scope("scope-1", "thread-1");
        };
        auto acquire_meanwhile = [&]() -> Task<void> {
            const bool reached = co_await poll_until_async([&] { return deleting->load(); });
            EXPECT_TRUE(reached);
            try {
                co_await backend->acquire(kKey, h.spec());
            } catch (const SandboxCleanupPending&) {
                refused_during_purge = true;
            }
            *release = true;
        };
        co_await (purging() && acquire_meanwhile());
    };
    drive(h.io, both());
    EXPECT_TRUE(refused_during_purge);
    EXPECT_EQ(purge.disposed, 1);
    EXPECT_FALSE(purge.undisposed);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);  // the refused acquire created nothing
    // Once the purge finished, the conversation is available again.
    drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
}

TEST(AcasAdmission, AcquiresStayRefusedUntilEveryOverlappingPurgeHasFinished) {
    Harness h;
    auto calls = std::make_shared<std::atomic<int>>(0);
    auto release = std::make_shared<std::atomic<bool>>(false);
    auto backend = h.backend([&](AcasSandboxConfig& c) {
        c.token.reset();
        c.credential_resolver = [calls, release](AcasCredentialRequest request) {
            return first_answer_waits(calls, release, std::move(request));
        };
    });
    bool refused_after_second = false;
    bool served_after_both = false;
    auto all = [&]() -> Task<void> {
        using namespace asio::experimental::awaitable_operators;
        auto first = [&]() -> Task<void> {
            co_await backend->dispose_scope("scope-1", "thread-1");  // held in the resolver
            const auto spec = h.spec();
            co_await backend->acquire(kKey, spec);
            served_after_both = true;
        };
        auto second = [&]() -> Task<void> {
            const bool held = co_await poll_until_async([&] { return calls->load() > 0; });
            EXPECT_TRUE(held);
            co_await backend->dispose_scope("scope-1", "thread-1");  // finishes first
            try {
                const auto spec = h.spec();
                co_await backend->acquire(kKey, spec);
            } catch (const SandboxCleanupPending&) {
                refused_after_second = true;  // the first purge is still running
            }
            *release = true;
        };
        co_await (first() && second());
    };
    drive(h.io, all());
    EXPECT_TRUE(refused_after_second);
    EXPECT_TRUE(served_after_both);
}

TEST(AcasAdmission, ACancelledPurgeStopsRefusingAcquires) {
    Harness h;
    auto calls = std::make_shared<std::atomic<int>>(0);
    auto release = std::make_shared<std::atomic<bool>>(false);
    auto backend = h.backend([&](AcasSandboxConfig& c) {
        c.token.reset();
        c.credential_resolver = [calls, release](AcasCredentialRequest request) {
            return first_answer_waits(calls, release, std::move(request));
        };
    });
    bool refused_while_purging = false;
    auto race = [&]() -> Task<void> {
        using namespace asio::experimental::awaitable_operators;
        auto purge = [&]() -> Task<void> {
            co_await backend->dispose_scope("scope-1", "thread-1");  // held in the resolver
        };
        auto cancel_it = [&]() -> Task<void> {
            const bool held = co_await poll_until_async([&] { return calls->load() > 0; });
            EXPECT_TRUE(held);
            try {
                const auto spec = h.spec();
                co_await backend->acquire(kKey, spec);
            } catch (const SandboxCleanupPending&) {
                refused_while_purging = true;
            }
        };
        co_await (purge() || cancel_it());  // the purge is cancelled once this returns
    };
    drive(h.io, race());
    EXPECT_TRUE(refused_while_purging);
    *release = true;
    drive(h.io, backend->acquire(kKey, h.spec()));  // the cancelled purge no longer refuses
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
}

TEST(AcasAdmission, AnotherConversationIsAcquiredWhileAPurgeRuns) {
    Harness h;
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec()));
    auto deleting = std::make_shared<std::atomic<bool>>(false);
    auto release = std::make_shared<std::atomic<bool>>(false);
    h.service.set_fault(
        [deleting, release](const net::HttpRequest& request,
                            const std::string& path) -> std::optional<net::HttpResponse> {
            if (is_sandbox_delete(request, path) && !*deleting) {
                *deleting = true;
                for (int i = 0; i < 200 && !*release; ++i)
                    std::this_thread::sleep_for(5ms);
            }
            return std::nullopt;
        });
    std::optional<std::string> other_id;
    auto both = [&]() -> Task<void> {
        using namespace asio::experimental::awaitable_operators;
        auto purging = [&]() -> Task<void> {
            co_await backend->dispose_scope("scope-1", "thread-1");
        };
        auto other = [&]() -> Task<void> {
            const bool reached = co_await poll_until_async([&] { return deleting->load(); });
            EXPECT_TRUE(reached);
            *release = true;  // the fake serves one request at a time: let the purge go on
            const SandboxKey key{"scope-1", "thread-2", "agent-1", ""};
            co_await backend->acquire(key, h.spec());
            other_id = backend->held_sandbox_id(key, "shell");
        };
        co_await (purging() && other());
    };
    drive(h.io, both());
    ASSERT_TRUE(other_id);
    EXPECT_TRUE(h.service.sandbox(*other_id));
}

TEST(AcasAdmission, AcquireForOneKeyAndKindIsSerialisedAcrossEventLoops) {
    Harness h;
    // One event loop per thread, outliving the backend whose pooled clients are bound to them.
    std::array<asio::io_context, 2> loops_io;
    auto backend = h.backend();
    // A slow label listing: without the lock both acquires would list before either creates.
    h.service.set_fault([](const net::HttpRequest& request,
                           const std::string& path) -> std::optional<net::HttpResponse> {
        if (request.method == "GET" && path.ends_with("/sandboxes"))
            std::this_thread::sleep_for(200ms);
        return std::nullopt;
    });
    std::barrier start(2);
    std::optional<std::string> ids[2];
    std::exception_ptr failures[2];
    std::vector<std::thread> loops;
    for (int i = 0; i < 2; ++i) {
        loops.emplace_back([&, i] {
            start.arrive_and_wait();
            try {
                drive(loops_io[i], backend->acquire(kKey, h.spec()));
                ids[i] = backend->held_sandbox_id(kKey, "shell");
            } catch (...) {
                failures[i] = std::current_exception();
            }
        });
    }
    for (auto& loop : loops)
        loop.join();
    for (auto& failure : failures) {
        if (failure)
            std::rethrow_exception(failure);
    }
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(h.service.live_sandboxes(), 1u);
    ASSERT_TRUE(ids[0] && ids[1]);
    EXPECT_EQ(*ids[0], *ids[1]);
}

TEST(AcasAdmission, AcquiresForOtherKeysAndKindsDoNotWaitForAnAcquireInProgress) {
    Harness h;
    auto calls = std::make_shared<std::atomic<int>>(0);
    auto release = std::make_shared<std::atomic<bool>>(false);
    auto backend = h.backend([&](AcasSandboxConfig& c) {
        c.token.reset();
        c.credential_resolver = [calls, release](AcasCredentialRequest request) {
            return first_answer_waits(calls, release, std::move(request));
        };
    });
    bool first_done = false;
    bool others_done_first = false;
    auto all = [&]() -> Task<void> {
        using namespace asio::experimental::awaitable_operators;
        auto first = [&]() -> Task<void> {
            co_await backend->acquire(kKey, h.spec());
            first_done = true;
        };
        auto others = [&]() -> Task<void> {
            const bool waiting = co_await poll_until_async([&] { return calls->load() > 0; });
            EXPECT_TRUE(waiting);
            // Another key of the same conversation, then another kind of the same key.
            // Named arguments: GCC 12 mishandles temporaries passed to a coroutine in co_await.
            const SandboxKey other_key{"scope-1", "thread-1", "agent-2", ""};
            const auto shell = h.spec();
            const auto codeact = h.spec([](auto& f) { f.kind = "codeact"; });
            co_await backend->acquire(other_key, shell);
            co_await backend->acquire(kKey, codeact);
            others_done_first = !first_done;
            *release = true;
        };
        co_await (first() && others());
    };
    drive(h.io, all());
    EXPECT_TRUE(others_done_first);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 3u);
}

TEST(AcasAdmission, AFailedResumeKeepsTheHeldRecordUntilItIsDisposed) {
    Harness h;
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec()));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    auto failed = std::make_shared<std::atomic<bool>>(true);
    h.service.set_fault([id, failed](const net::HttpRequest& request,
                                     const std::string& path) -> std::optional<net::HttpResponse> {
        if (*failed && request.method == "GET" && path.ends_with("/sandboxes/" + id)) {
            net::HttpResponse response;
            response.headers.set("Content-Type", "application/json");
            response.body =
                boost::json::serialize(boost::json::object{{"id", id}, {"state", "Failed"}});
            return response;
        }
        return std::nullopt;
    });
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxTransientError);
    // Not replaced: the record stays, nothing new was created, the instance was not deleted.
    EXPECT_EQ(*backend->held_sandbox_id(kKey, "shell"), id);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(h.service.count("DELETE", "/sandboxes/" + id), 0u);
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxTransientError);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    // Explicit disposal clears it; the next acquire creates a new sandbox.
    *failed = false;
    EXPECT_FALSE(drive(h.io, backend->dispose(kKey, std::string("shell"))));
    EXPECT_FALSE(h.service.sandbox(id));
    drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
}

TEST(AcasAdmission, AHeldSandboxTheServiceNoLongerHasIsReplacedByANewOne) {
    Harness h;
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec()));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    // Deleted behind this backend's back (the idle timeout, another replica's purge).
    auto other = h.backend();
    ASSERT_TRUE(drive(h.io, other->remove_sandbox(id)));
    drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
    EXPECT_NE(*backend->held_sandbox_id(kKey, "shell"), id);
}

TEST(AcasAdmission, AnInvalidationDuringWorkDirectoryPreparationRefusesTheAcquire) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    auto preparing = std::make_shared<std::atomic<bool>>(false);
    // The warm acquire's storage-base mkdir is slow: the sandbox is invalidated meanwhile.
    h.service.set_fault([preparing](const net::HttpRequest&,
                                    const std::string& path) -> std::optional<net::HttpResponse> {
        if (path.ends_with("/files/mkdir") && !*preparing) {
            *preparing = true;
            std::this_thread::sleep_for(300ms);
        }
        return std::nullopt;
    });
    bool refused = false;
    auto both = [&]() -> Task<void> {
        using namespace asio::experimental::awaitable_operators;
        auto again = [&]() -> Task<void> {
            // Refused either by the final check (SandboxInvalidated) or, when the background
            // deletion has already answered, by the base walk finding the sandbox gone.
            try {
                const auto spec = h.spec();
                co_await backend->acquire(kKey, spec);
            } catch (const Error&) {
                refused = true;
            }
        };
        auto invalidate = [&]() -> Task<void> {
            const bool reached = co_await poll_until_async([&] { return preparing->load(); });
            EXPECT_TRUE(reached);
            // An exec whose deadline has passed times out without a request and invalidates.
            ExecRequest request;
            request.command = std::string("true");
            request.timeout = Seconds{0};
            try {
                co_await sandbox->exec(request);
            } catch (const Timeout&) {
            }
        };
        co_await (again() && invalidate());
    };
    drive(h.io, both());
    EXPECT_TRUE(refused);
    // Retrying recovers: the invalidated sandbox is deleted first, then a new one is created.
    drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_FALSE(h.service.sandbox(id));
    EXPECT_NE(*backend->held_sandbox_id(kKey, "shell"), id);
}

TEST(AcasAdmission, CancellingAnExecDisposesTheSandbox) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    auto cancel_during_exec = [&]() -> Task<void> {
        using namespace asio::experimental::awaitable_operators;
        auto slow = [&]() -> Task<void> {
            ExecRequest request;
            request.command = std::string("sleep 2");
            co_await sandbox->exec(request);
        };
        auto cancel = [&]() -> Task<void> {
            // Cancelled once the exec has reached the service.
            co_await poll_until_async([&] {
                const auto commands = h.service.exec_commands();
                return !commands.empty() && commands.back().find("sleep 2") != std::string::npos;
            });
        };
        co_await (slow() || cancel());
    };
    drive(h.io, cancel_during_exec());
    // The disposal completes once the fake has answered the abandoned exec.
    EXPECT_TRUE(drive(h.io, poll_until_async([&] { return !h.service.sandbox(id); })));
    EXPECT_FALSE(backend->held_sandbox_id(kKey, "shell"));
    ExecRequest request;
    request.command = std::string("true");
    EXPECT_THROW(drive(h.io, sandbox->exec(request)), SandboxInvalidated);
}

}  // namespace
}  // namespace maf_sandbox::acas
