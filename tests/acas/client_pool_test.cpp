// The client pool's invariants, on the pool alone against the fake data plane: one client per
// binding and loop, a full loop evicts only an idle client and waits (bounded) rather than evict
// a leased one, the request count survives eviction, and a stopped pool lends nothing.
#include <gtest/gtest.h>

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>

#include "client_pool.hpp"
#include "fake_service.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/azure/credentials.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;

struct Pool {
    explicit Pool(std::size_t max_per_loop, Seconds wait = Seconds{5.0}) {
        AcasClientOptions o;
        o.endpoint = fake.endpoint();
        o.subscription_id = "sub";
        o.resource_group = "rg";
        o.sandbox_group = "grp";
        o.ca_file = fake.ca_file();
        pool = std::make_shared<ClientPool>(std::move(o),
                                            ClientPoolLimits{max_per_loop, Seconds{300.0}, wait});
    }
    ClientLease lease(const Binding& binding) { return drive(io, pool->lease(binding)); }

    testing::FakeAcasService fake;
    boost::asio::io_context io;
    std::shared_ptr<ClientPool> pool;
};

Binding binding(std::string authority) {
    auto credential = azure::make_static_token_credential("test-token");
    return Binding{std::move(authority), "1",
                   [credential](boost::asio::any_io_executor) { return credential; }};
}

TEST(ClientPool, OneBindingSharesOneClientOnALoop) {
    Pool p(4);
    auto first = p.lease(binding("a"));
    auto second = p.lease(binding("a"));
    EXPECT_EQ(&first.client(), &second.client());
    EXPECT_EQ(p.pool->open_clients(), 1u);
    auto other = p.lease(binding("b"));
    EXPECT_NE(&other.client(), &first.client());
    EXPECT_EQ(p.pool->open_clients(), 2u);
}

TEST(ClientPool, AFullLoopWaitsForALeasedClientInsteadOfEvictingItThenEvictsTheIdleOne) {
    Pool p(1, Seconds{0.2});
    {
        auto held = p.lease(binding("a"));
        EXPECT_THROW(p.lease(binding("b")), AcasCredentialError);
        EXPECT_EQ(p.pool->open_clients(), 1u);
        // The leased client was not closed under its holder: it still answers.
        drive(p.io, held->list_prebuilt_images(deadline_after(Seconds{20.0})));
    }
    auto replacement = p.lease(binding("b"));
    EXPECT_EQ(p.pool->open_clients(), 1u);
    // The evicted client's request still counts.
    EXPECT_EQ(p.pool->requests_sent(), 1u);
    drive(p.io, replacement->list_prebuilt_images(deadline_after(Seconds{20.0})));
    EXPECT_EQ(p.pool->requests_sent(), 2u);
    EXPECT_EQ(p.fake.count("GET", "/diskimages/public"), 2u);
}

TEST(ClientPool, AStoppedPoolHandsOverEveryClientAndLendsNoMore) {
    Pool p(4);
    {
        auto lease = p.lease(binding("a"));
        drive(p.io, lease->list_prebuilt_images(deadline_after(Seconds{20.0})));
    }
    const auto entries = p.pool->stop();
    EXPECT_EQ(entries.size(), 1u);
    EXPECT_EQ(p.pool->open_clients(), 0u);
    EXPECT_EQ(p.pool->requests_sent(), 1u);
    EXPECT_THROW(p.lease(binding("a")), AcasBackendClosed);
}

TEST(ClientPool, ClosingALoopsIdleClientsKeepsTheLeasedOnesAndTheCount) {
    Pool p(4);
    auto kept = p.lease(binding("a"));
    {
        auto idle = p.lease(binding("b"));
        drive(p.io, idle->list_prebuilt_images(deadline_after(Seconds{20.0})));
    }
    const auto context = &boost::asio::query(p.io.get_executor(), boost::asio::execution::context);
    p.pool->close_idle_on(context);
    EXPECT_EQ(p.pool->open_clients(), 1u);
    EXPECT_EQ(p.pool->requests_sent(), 1u);
    auto again = p.lease(binding("a"));
    EXPECT_EQ(&again.client(), &kept.client());
}

}  // namespace
}  // namespace maf_sandbox::acas
