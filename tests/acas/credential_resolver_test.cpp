// The host-selected credential resolver and the client cache (README "Host-selected
// credentials"), against the fake data plane: every token the service sees is recorded, so which
// grant served which request is observed on the wire, not inferred.
#include <gtest/gtest.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <mutex>
#include <thread>

#include "harness.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/azure/credentials.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;
namespace asio = boost::asio;

// The host's side: which grant it hands out now, what it was asked, and how many credentials its
// factories made. Tokens are "Bearer <authority>-<generation>" so the wire shows the grant.
struct Grants {
    std::mutex mutex;
    std::vector<AcasCredentialRequest> asked;
    std::string authority = "tenant-a";
    std::string generation = "1";
    bool fail = false;
    bool stall = false;
    int credentials_made = 0;

    void select(std::string new_authority, std::string new_generation) {
        std::lock_guard lock(mutex);
        authority = std::move(new_authority);
        generation = std::move(new_generation);
    }
    int made() {
        std::lock_guard lock(mutex);
        return credentials_made;
    }
    std::vector<AcasCredentialRequest> requests() {
        std::lock_guard lock(mutex);
        return asked;
    }
};

Task<AcasCredentialBinding> answer(std::shared_ptr<Grants> grants, AcasCredentialRequest request) {
    bool stall = false;
    AcasCredentialBinding binding;
    {
        std::lock_guard lock(grants->mutex);
        grants->asked.push_back(request);
        if (grants->fail)
            throw std::runtime_error("the token exchange for this conversation was refused");
        stall = grants->stall;
        binding.authority = grants->authority;
        binding.generation = grants->generation;
    }
    if (stall) {
        auto executor = co_await asio::this_coro::executor;
        asio::steady_timer never(executor);
        never.expires_after(std::chrono::seconds(30));
        co_await never.async_wait(asio::use_awaitable);
    }
    const auto token = binding.authority + "-" + binding.generation;
    binding.create_credential = [grants, token](asio::any_io_executor) {
        std::lock_guard lock(grants->mutex);
        ++grants->credentials_made;
        return azure::make_static_token_credential(token);
    };
    co_return binding;
}

std::unique_ptr<AcasBackend> backend_with(Harness& h, const std::shared_ptr<Grants>& grants,
                                          std::function<void(AcasSandboxConfig&)> tweak = {}) {
    return h.backend([&](AcasSandboxConfig& c) {
        c.token.reset();  // the resolver is the only source of identity
        c.credential_resolver = [grants](AcasCredentialRequest request) {
            return answer(grants, std::move(request));
        };
        if (tweak)
            tweak(c);
    });
}

// The bearer tokens of the requests whose path ends with `suffix` (method `method`), in order.
std::vector<std::string> tokens_for(testing::FakeAcasService& service, const std::string& method,
                                    const std::string& suffix, std::size_t from = 0) {
    const auto log = service.log();
    const auto auth = service.authorizations();
    std::vector<std::string> out;
    for (std::size_t i = from; i < log.size() && i < auth.size(); ++i) {
        const auto& [m, p] = log[i];
        if (m == method && p.size() >= suffix.size() &&
            p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0) {
            out.push_back(auth[i]);
        }
    }
    return out;
}

TEST(AcasCredentialResolver, IsAskedPerOperationWithTheTrustedScopeThreadAndKey) {
    Harness h;
    auto grants = std::make_shared<Grants>();
    auto backend = backend_with(h, grants);
    drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_FALSE(drive(h.io, backend->dispose(kKey, std::string("shell"))));
    EXPECT_FALSE(drive(h.io, backend->dispose_scope("scope-1", "thread-1")).undisposed);

    const auto asked = grants->requests();
    ASSERT_EQ(asked.size(), 3u);
    EXPECT_EQ(asked[0].operation, AcasOperation::acquire);
    EXPECT_EQ(asked[1].operation, AcasOperation::dispose);
    EXPECT_EQ(asked[2].operation, AcasOperation::dispose_scope);
    for (const auto& request : asked) {
        EXPECT_EQ(request.scope, "scope-1");
        EXPECT_EQ(request.thread_id, "thread-1");
    }
    ASSERT_TRUE(asked[0].key);
    EXPECT_EQ(*asked[0].key, kKey);
    ASSERT_TRUE(asked[1].key);
    EXPECT_EQ(*asked[1].key, kKey);
    EXPECT_FALSE(asked[2].key);  // a purge names a conversation, not a key
    for (const auto& token : h.service.authorizations()) {
        EXPECT_EQ(token, "Bearer tenant-a-1");
    }
}

TEST(AcasCredentialResolver, EqualAuthorityAndGenerationShareAClientANewGenerationIsolates) {
    Harness h;
    auto grants = std::make_shared<Grants>();
    auto backend = backend_with(h, grants);
    drive(h.io, backend->acquire(kKey, h.spec()));
    drive(h.io, backend->acquire(SandboxKey{"scope-1", "thread-1", "agent-2", ""}, h.spec()));
    EXPECT_EQ(grants->made(), 1);
    EXPECT_EQ(backend->open_clients(), 1u);

    grants->select("tenant-a", "2");  // rotation: same authority, new generation
    const auto before = h.service.requests();
    drive(h.io, backend->acquire(SandboxKey{"scope-1", "thread-1", "agent-3", ""}, h.spec()));
    EXPECT_EQ(grants->made(), 2);
    EXPECT_EQ(backend->open_clients(), 2u);
    const auto rotated = tokens_for(h.service, "PUT", "/sandboxes", before);
    ASSERT_EQ(rotated.size(), 1u);
    EXPECT_EQ(rotated[0], "Bearer tenant-a-2");
}

TEST(AcasCredentialResolver, AFailureNeverFallsBackToTheDefaultIdentity) {
    Harness h;
    auto grants = std::make_shared<Grants>();
    grants->fail = true;
    auto backend = backend_with(h, grants);
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), AcasCredentialError);
    const auto purge = drive(h.io, backend->dispose_scope("scope-1", "thread-1"));
    ASSERT_TRUE(purge.undisposed);
    EXPECT_EQ(purge.disposed, 0);
    EXPECT_EQ(h.service.requests(), 0u);  // nothing was sent under any identity
    EXPECT_EQ(grants->made(), 0);
}

TEST(AcasCredentialResolver, AResolverThatDoesNotAnswerIsBoundedByClientWait) {
    Harness h;
    auto grants = std::make_shared<Grants>();
    grants->stall = true;
    auto backend = backend_with(h, grants, [](auto& c) { c.client_wait = Seconds{0.2}; });
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), AcasCredentialError);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_EQ(h.service.requests(), 0u);
}

TEST(AcasCredentialResolver, AnAcquiredSandboxKeepsItsCapturedGrant) {
    Harness h;
    auto grants = std::make_shared<Grants>();
    auto backend = backend_with(h, grants);
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));

    grants->select("tenant-b", "7");  // the host now selects another grant for new work
    const auto before = h.service.requests();
    ExecRequest request;
    request.command = std::string("printf kept");
    EXPECT_EQ(drive(h.io, sandbox->exec(request)).stdout_bytes, "kept");
    drive(h.io, sandbox->write_file("granted.txt", "bytes", ""));
    EXPECT_EQ(drive(h.io, sandbox->read_file("granted.txt", "", 64)), "bytes");
    const auto execs = tokens_for(h.service, "POST", "/executeShellCommand", before);
    ASSERT_FALSE(execs.empty());
    for (const auto& token : execs)
        EXPECT_EQ(token, "Bearer tenant-a-1");
    for (const auto& token : tokens_for(h.service, "GET", "/files", before))
        EXPECT_EQ(token, "Bearer tenant-a-1");

    // Disposal resolves afresh (another replica must be able to clean up with its own grant).
    const auto before_dispose = h.service.requests();
    EXPECT_FALSE(drive(h.io, backend->dispose(kKey, std::string("shell"))));
    const auto deletes = tokens_for(h.service, "DELETE", "", before_dispose);
    ASSERT_FALSE(deletes.empty());
    for (const auto& token : deletes)
        EXPECT_EQ(token, "Bearer tenant-b-7");
}

TEST(AcasClientCache, AnIdleClientIsClosedAfterClientIdleAndTheWarmSandboxStaysUsable) {
    Harness h;
    auto grants = std::make_shared<Grants>();
    auto backend = backend_with(h, grants, [](auto& c) { c.client_idle = Seconds{0.2}; });
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    EXPECT_EQ(grants->made(), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));

    ExecRequest request;
    request.command = std::string("printf still-here");
    EXPECT_EQ(drive(h.io, sandbox->exec(request)).stdout_bytes, "still-here");
    EXPECT_EQ(grants->made(), 2);  // the idle client was closed and a fresh one made
    EXPECT_EQ(backend->open_clients(), 1u);
    EXPECT_EQ(h.service.live_sandboxes(), 1u);  // eviction never touches a sandbox
    drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_EQ(*backend->held_sandbox_id(kKey, "shell"), id);  // nor a warm handle
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
}

TEST(AcasClientCache, AtCapacityTheLeastRecentlyUsedIdleClientIsEvicted) {
    Harness h;
    auto grants = std::make_shared<Grants>();
    auto backend = backend_with(h, grants, [](auto& c) { c.max_clients_per_loop = 1; });
    auto first = drive(h.io, backend->acquire(kKey, h.spec()));
    grants->select("tenant-b", "1");
    drive(h.io, backend->acquire(SandboxKey{"scope-1", "thread-1", "agent-2", ""}, h.spec()));
    EXPECT_EQ(backend->open_clients(), 1u);
    EXPECT_EQ(grants->made(), 2);
    ExecRequest request;
    request.command = std::string("printf first");
    EXPECT_EQ(drive(h.io, first->exec(request)).stdout_bytes, "first");  // its grant, re-made
    EXPECT_EQ(grants->made(), 3);
    EXPECT_EQ(h.service.live_sandboxes(), 2u);
}

}  // namespace
}  // namespace maf_sandbox::acas
