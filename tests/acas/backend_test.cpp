// AcasBackend end to end over HTTPS against the fake data plane in fake_service.hpp: real
// capture scripts on a real shell, real path walks, real retries.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "harness.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/core/conformance.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;
using maf_sandbox::testing::FakeAcasService;
using maf_sandbox::testing::TempDir;
namespace asio = boost::asio;

TEST(AcasBackend, DeclaresTheCeilingOfTheReadmeAndNothingMore) {
    Harness h;
    auto backend = h.backend();
    const auto d = backend->declarations();
    EXPECT_EQ(d.capabilities,
              (std::set<Capability>{Capability::exec, Capability::files_in, Capability::files_out,
                                    Capability::files_list, Capability::files_delete,
                                    Capability::host_tools}));
    EXPECT_EQ(d.egress_modes, (std::set<Egress>{Egress::allowlist, Egress::closed}));
    EXPECT_EQ(d.os_families, (std::set<OsFamily>{OsFamily::posix}));
    EXPECT_EQ(d.isolation_scopes,
              (std::set<IsolationScope>{IsolationScope::conversation, IsolationScope::call}));
    // The README's figures, written out: comparing with kAcasTransferLimits would compare the
    // declaration with its own source.
    const TransferLimits ceiling{32u * 1024 * 1024, 128u * 1024 * 1024, 128};
    EXPECT_EQ(d.limits.files_in, ceiling);
    EXPECT_EQ(d.limits.files_out, ceiling);
    EXPECT_EQ(backend->name(), "acas");
}

TEST(AcasBackend, DeclaresTheTransferLimitsItsConfigSetsPerDirection) {
    Harness h;
    const TransferLimits in{1024, 4096, 3}, out{2048, 8192, 5};
    auto backend = h.backend([&](auto& c) { c.limits = SandboxLimits{in, out}; });
    EXPECT_EQ(backend->declarations().limits.files_in, in);
    EXPECT_EQ(backend->declarations().limits.files_out, out);
}

TEST(AcasBackend, ALoopbackEndpointImpliesEmulatorModeWhichClaimsOnlyTheNamedRung) {
    Harness h("0.1.0; isolation=container");
    auto backend = h.backend();
    EXPECT_EQ(backend->isolation(), Isolation::none);  // nothing seen yet: claim nothing
    drive(h.io, backend->discover());
    EXPECT_EQ(backend->isolation(), Isolation::container);
}

TEST(AcasBackend, ConfigValidationRefusesUnsafeValues) {
    Harness h;
    for (auto tweak : std::vector<std::function<void(AcasSandboxConfig&)>>{
             [](auto& c) { c.endpoint = "http://x.example.com"; },
             [](auto& c) { c.endpoint += "/"; },
             [](auto& c) { c.subscription_id = "a/b"; },
             [](auto& c) { c.resource_group = ".."; },
             [](auto& c) { c.sandbox_group = ""; },
         }) {
        EXPECT_THROW(h.backend(tweak), InvalidArgument);
    }
}

TEST(AcasBackend, AcquireCreatesLabelledThenRunsCommandsAndFilesEndToEnd) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(h.service.count("POST", "/lifecycle"), 1u);
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    const auto created = *h.service.sandbox(id);
    EXPECT_EQ(created.at("labels").at("scope").as_string(), "scope-1");
    EXPECT_EQ(created.at("labels").at("kind").as_string(), "shell");
    EXPECT_EQ(created.at("lifecyclePolicy")
                  .at("autoDeletePolicy")
                  .at("deleteIntervalInSeconds")
                  .as_int64(),
              600);
    EXPECT_EQ(created.at("egressPolicy").at("defaultAction").as_string(), "Deny");

    drive(h.io, sandbox->write_file("dir/hello.txt", std::string("h\xe9llo\0!", 7), ""));
    ExecRequest cat;
    cat.command = Argv{"cat", "dir/hello.txt"};
    const auto result = drive(h.io, sandbox->exec(cat));
    EXPECT_EQ(result.stdout_bytes,
              std::string("h\xe9llo\0!", 7));  // bytes survive the text-only exec
    EXPECT_EQ(result.exit_code, 0);

    ExecRequest failing;
    failing.command = std::string("echo oops >&2; exit 7");
    const auto failed = drive(h.io, sandbox->exec(failing));
    EXPECT_EQ(failed.exit_code, 7);
    EXPECT_EQ(failed.stderr_bytes, "oops\n");

    const auto entry = drive(h.io, sandbox->stat_file("dir/hello.txt", ""));
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->kind, EntryKind::file);
    EXPECT_EQ(entry->size_bytes, 7u);
    EXPECT_EQ(drive(h.io, sandbox->read_file("dir/hello.txt", "", 1024)),
              std::string("h\xe9llo\0!", 7));
    EXPECT_THROW(drive(h.io, sandbox->read_file("dir/hello.txt", "", 3)),
                 SandboxTransferCapExceeded);
    const auto listing = drive(h.io, sandbox->list_dir("dir", ""));
    ASSERT_EQ(listing.size(), 1u);
    EXPECT_EQ(listing[0].path, "dir/hello.txt");

    drive(h.io, sandbox->remove("dir", "", true));
    EXPECT_FALSE(drive(h.io, sandbox->stat_file("dir", "")));

    auto again = drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);  // warm reuse
    EXPECT_EQ(*backend->held_sandbox_id(kKey, "shell"), id);
}

TEST(AcasBackend, ExecCapturesLargeOutputAndRefusesOverTheLimitWithTheHead) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    ExecRequest big;
    big.command = std::string("head -c 120000 /dev/zero | tr '\\0' 'a'");
    EXPECT_EQ(drive(h.io, sandbox->exec(big)).stdout_bytes, std::string(120000, 'a'));
    ExecRequest over = big;
    over.max_output_bytes = 1000;
    try {
        drive(h.io, sandbox->exec(over));
        FAIL() << "expected ExecOutputLimitExceeded";
    } catch (const ExecOutputLimitExceeded& e) {
        EXPECT_EQ(e.stdout_head(), std::string(1000, 'a'));
    }
    ExecRequest after;  // an overflow is clean: the sandbox stays usable
    after.command = std::string("printf ok");
    EXPECT_EQ(drive(h.io, sandbox->exec(after)).stdout_bytes, "ok");
}

TEST(AcasBackend, ExecDeliversStdinByStagingItAsAFile) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    ExecRequest request;
    request.command = std::string("wc -c");
    request.stdin_bytes = std::string(70000, 'z');
    EXPECT_EQ(drive(h.io, sandbox->exec(request)).stdout_text(), "70000\n");
}

// The program finds its own scratch directory through its stdout fifo, as a hostile one could.
constexpr const char* kScratchOfThisExec = "d=$(dirname \"$(readlink /proc/$$/fd/1)\"); ";

TEST(AcasBackend, AWarmExecWhoseOutputFitsOneAnswerIsOneRequestByteExactAndLeavesNoScratch) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto one_exec = [&](std::string command) {
        ExecRequest request;
        request.command = std::move(command);
        const auto before = h.service.requests();
        auto result = drive(h.io, sandbox->exec(request));
        EXPECT_EQ(h.service.requests() - before, 1u) << std::get<std::string>(request.command);
        return result;
    };
    EXPECT_EQ(one_exec("true").exit_code, 0);

    // Binary bytes, NUL included, and no trailing newline on either stream.
    const auto binary = one_exec("printf 'a\\000b\\377\\n\\n'; printf 'e\\000\\001' >&2; exit 3");
    EXPECT_EQ(binary.stdout_bytes, std::string("a\0b\xff\n\n", 6));
    EXPECT_EQ(binary.stderr_bytes, std::string("e\0\x01", 3));
    EXPECT_EQ(binary.exit_code, 3);

    // A program writing its own token lines and a forged manifest changes nothing.
    const auto forged = one_exec(std::string(kScratchOfThisExec) +
                                 "t=$(basename \"$d\"); printf '%s 0 0 0\\n%s\\n' \"$t\" \"$t\"; "
                                 "printf '\\n%s 0\\n' \"$t\" >&2; printf '%s' \"$d\" >&2");
    const auto token_end = forged.stdout_bytes.find(' ');
    ASSERT_NE(token_end, std::string::npos);
    const auto token = forged.stdout_bytes.substr(0, token_end);
    EXPECT_EQ(token.rfind("maf-exec-", 0), 0u);
    EXPECT_EQ(forged.stdout_bytes, token + " 0 0 0\n" + token + "\n");
    EXPECT_EQ(forged.stderr_bytes, "\n" + token + " 0\n/tmp/" + token);
    EXPECT_FALSE(std::filesystem::exists("/tmp/" + token));  // removed by the same command

    // Exactly one chunk in all still fits; one byte more is read back and cleaned up separately.
    const auto full = one_exec("head -c 49151 /dev/zero | tr '\\0' 'x'; printf y >&2");
    EXPECT_EQ(full.stdout_bytes, std::string(49151, 'x'));
    EXPECT_EQ(full.stderr_bytes, "y");
    ExecRequest over;
    over.command = std::string("head -c 49152 /dev/zero | tr '\\0' 'x'; printf 'y\\000' >&2");
    const auto before = h.service.requests();
    const auto split = drive(h.io, sandbox->exec(over));
    EXPECT_EQ(h.service.requests() - before, 4u);  // capture, one chunk per stream, cleanup
    EXPECT_EQ(split.stdout_bytes, std::string(49152, 'x'));
    EXPECT_EQ(split.stderr_bytes, std::string("y\0", 2));
}

TEST(AcasBackend, ExecStagedStdinAndScratchAreBothRemovedByTheCaptureCommand) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    ExecRequest request;
    request.command = std::string(kScratchOfThisExec) + "cat; printf '%s' \"$d\" >&2";
    request.stdin_bytes = std::string("in\0put", 6);
    const auto before = h.service.requests();
    const auto result = drive(h.io, sandbox->exec(request));
    EXPECT_EQ(h.service.requests() - before, 4u);  // three to stage stdin, one to run
    EXPECT_EQ(result.stdout_bytes, std::string("in\0put", 6));
    ASSERT_EQ(result.stderr_bytes.rfind("/tmp/maf-exec-", 0), 0u);
    EXPECT_FALSE(std::filesystem::exists(result.stderr_bytes));
    EXPECT_FALSE(std::filesystem::exists(result.stderr_bytes + ".stdin"));
}

TEST(AcasBackend, AScratchDirectoryReplacedByALinkIsNeverReadAndDisposesTheSandbox) {
    Harness h;
    TempDir elsewhere;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    const auto moved = (elsewhere.path() / "moved").string();
    ExecRequest request;
    request.command = std::string(kScratchOfThisExec) + "mv \"$d\" " + shell_quote(moved) +
                      " && ln -s " + shell_quote(moved) + " \"$d\"; printf secret";
    EXPECT_THROW(drive(h.io, sandbox->exec(request)), AcasExecCaptureFailed);
    EXPECT_FALSE(h.service.sandbox(id));  // outcome unknown: invalidated and disposed
}

TEST(AcasBackend, AFailedScratchRemovalWarnsNamingTheDirectoryAndKeepsTheBytes) {
    Harness h;
    auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
    auto log = std::make_shared<spdlog::logger>("acas-test", sink);
    auto backend = h.backend([&](auto& c) { c.log = log; });
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    ExecRequest request;
    request.command =
        std::string(kScratchOfThisExec) + ": > \"$d/extra\"; printf '%s' \"$d\"; exit 4";
    const auto before = h.service.requests();
    const auto file_plane_deletes = h.service.count("DELETE", "/files");
    const auto result = drive(h.io, sandbox->exec(request));
    EXPECT_EQ(h.service.requests() - before, 1u);
    EXPECT_EQ(h.service.count("DELETE", "/files"), file_plane_deletes);  // no host-plane removal
    EXPECT_EQ(result.exit_code, 4);
    ASSERT_EQ(result.stdout_bytes.rfind("/tmp/maf-exec-", 0), 0u);
    const auto warnings = sink->last_formatted();
    ASSERT_FALSE(warnings.empty());
    EXPECT_NE(warnings.back().find(result.stdout_bytes), std::string::npos);
    std::filesystem::remove_all(result.stdout_bytes);
    ExecRequest again;  // the sandbox stays usable
    again.command = std::string("printf ok");
    EXPECT_EQ(drive(h.io, sandbox->exec(again)).stdout_bytes, "ok");
}

TEST(AcasBackend, AWarmAcquireWithChangedEgressRaisesTheConflictAndKeepsTheOriginal) {
    Harness h;
    auto backend = h.backend();
    const auto with_hosts = [&](std::vector<std::string> hosts) {
        return h.spec([&](auto& f) {
            f.egress = Egress::allowlist;
            f.egress_allow = hosts;
        });
    };
    drive(h.io, backend->acquire(kKey, with_hosts({"a.example.com", "B.example.com"})));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    // Order and case do not matter.
    drive(h.io, backend->acquire(kKey, with_hosts({"b.example.com", "A.EXAMPLE.COM"})));
    try {
        drive(h.io, backend->acquire(kKey, with_hosts({"c.example.com"})));
        FAIL() << "expected AcasEgressPolicyConflict";
    } catch (const EgressPolicyConflict& e) {
        EXPECT_EQ(e.type_name(), "AcasEgressPolicyConflict");
    }
    // Existing catches of the unsupported-mode error still see it.
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, with_hosts({"c.example.com"}))),
                 SandboxEgressNotEnforced);
    EXPECT_EQ(*backend->held_sandbox_id(kKey, "shell"), id);
    EXPECT_TRUE(h.service.sandbox(id));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
}

TEST(AcasBackend, AnUnknownBareImageIsRefusedBeforeAnyCreateWithTheCatalogue) {
    Harness h;
    auto backend = h.backend();
    try {
        drive(h.io, backend->acquire(kKey, h.spec([](auto& f) { f.image = "pyhton-3.13"; })));
        FAIL() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("host, python-3.13, ubuntu"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 0u);
}

TEST(AcasBackend, ATaggedImageIsQualifiedByTheRegistryAndBootsItsImportedDisk) {
    Harness h;
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec([](auto& f) { f.image = "tool:1.0"; })));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    EXPECT_EQ(h.service.sandbox(id)->at("lifecycle").is_object(), true);
    EXPECT_THROW(drive(h.io, backend->acquire(SandboxKey{"s", "t", "a", ""},
                                              h.spec([](auto& f) { f.image = "other:2"; }))),
                 InvalidArgument);
}

TEST(AcasBackend, AnExecFailingInFlightIsNeverResentAndDisposesTheSandbox) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    const auto execs_before = h.service.count("POST", "/executeShellCommand");
    h.service.set_fault(
        [](const net::HttpRequest&, const std::string& path) -> std::optional<net::HttpResponse> {
            if (path.find("/executeShellCommand") != std::string::npos) {
                net::HttpResponse r;
                r.status = 503;
                return r;
            }
            return std::nullopt;
        });
    ExecRequest request;
    request.command = std::string("true");
    EXPECT_THROW(drive(h.io, sandbox->exec(request)), AcasRequestOutcomeUnknown);
    EXPECT_EQ(h.service.count("POST", "/executeShellCommand"), execs_before + 1);
    EXPECT_FALSE(h.service.sandbox(id));  // invalidated and disposed
    EXPECT_THROW(drive(h.io, sandbox->exec(request)), SandboxInvalidated);
}

TEST(AcasBackend, A429StormIsSurvivedWithoutLeakingASandbox) {
    Harness h;
    auto backend = h.backend();
    auto storm = std::make_shared<std::atomic<int>>(0);
    h.service.set_fault(
        [storm](const net::HttpRequest&, const std::string&) -> std::optional<net::HttpResponse> {
            if (++*storm % 2 == 1) {  // every other request is throttled
                net::HttpResponse r;
                r.status = 429;
                r.headers.set("Retry-After", "0");
                return r;
            }
            return std::nullopt;
        });
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    ExecRequest request;
    request.command = std::string("printf fine");
    EXPECT_EQ(drive(h.io, sandbox->exec(request)).stdout_bytes, "fine");
    EXPECT_EQ(h.service.live_sandboxes(), 1u);
}

TEST(AcasBackend, AFailedLifecyclePolicyDisposesTheNewSandboxAndFailsTheAcquire) {
    Harness h;
    auto backend = h.backend();
    h.service.set_fault(
        [](const net::HttpRequest&, const std::string& path) -> std::optional<net::HttpResponse> {
            if (path.find("/lifecycle") != std::string::npos) {
                net::HttpResponse r;
                r.status = 400;
                r.body = R"({"title":"BadPolicy"})";
                return r;
            }
            return std::nullopt;
        });
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), AcasServiceError);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
}

TEST(AcasBackend, ACancelledAcquireLeavesNothingBehind) {
    Harness h;
    auto backend = h.backend();
    // Cancelled while its lifecycle POST is in flight (after the create), whatever the load.
    auto in_flight = std::make_shared<std::atomic<bool>>(false);
    h.service.set_fault([in_flight](const net::HttpRequest& request,
                                    const std::string& path) -> std::optional<net::HttpResponse> {
        if (request.method == "POST" && path.find("/lifecycle") != std::string::npos) {
            *in_flight = true;
            std::this_thread::sleep_for(std::chrono::milliseconds(400));  // slow enough to cancel
        }
        return std::nullopt;
    });
    using namespace asio::experimental::awaitable_operators;
    auto cancel_when_in_flight = [&]() -> Task<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor);
        for (int waited = 0; !*in_flight && waited < 2000; ++waited) {  // at most 10 s
            timer.expires_after(std::chrono::milliseconds(5));
            co_await timer.async_wait(asio::use_awaitable);
        }
    };
    auto race = [&]() -> Task<void> {
        auto acquire = backend->acquire(kKey, h.spec());
        auto cancel = cancel_when_in_flight();
        co_await (std::move(acquire) || std::move(cancel));
    };
    drive(h.io, race());
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
}

TEST(AcasBackend, ASecondBackendPurgesTheConversationByLabel) {
    Harness h;
    auto first = h.backend();
    drive(h.io, first->acquire(kKey, h.spec()));
    drive(h.io, first->acquire(SandboxKey{"scope-1", "thread-1", "agent-2", ""}, h.spec()));
    drive(h.io, first->acquire(SandboxKey{"scope-1", "thread-2", "agent-1", ""}, h.spec()));
    ASSERT_EQ(h.service.live_sandboxes(), 3u);
    auto second = h.backend();  // another replica: knows nothing in memory
    const auto purge = drive(h.io, second->dispose_scope("scope-1", "thread-1"));
    EXPECT_EQ(purge.disposed, 2);
    EXPECT_FALSE(purge.undisposed);
    EXPECT_EQ(h.service.live_sandboxes(), 1u);
}

TEST(AcasBackend, DisposeDeletesTheKindAndAWarmHandleFromAnotherBackendIsFoundByLabel) {
    Harness h;
    auto first = h.backend();
    drive(h.io, first->acquire(kKey, h.spec()));
    auto second = h.backend();
    drive(h.io, second->acquire(kKey, h.spec()));  // adopts the live sandbox by its labels
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_FALSE(drive(h.io, second->dispose(kKey, std::string("shell"))));
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
}

TEST(AcasBackend, AtCallScopeEveryAcquireCreates) {
    Harness h;
    auto backend = h.backend();
    const auto spec = h.spec([](auto& f) { f.isolation_scope = IsolationScope::call; });
    drive(h.io, backend->acquire(SandboxKey{"s", "t", "a", "call-1"}, spec));
    drive(h.io, backend->acquire(SandboxKey{"s", "t", "a", "call-2"}, spec));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
    EXPECT_THROW(drive(h.io, backend->acquire(SandboxKey{"s", "t", "a", ""}, spec)),
                 InvalidArgument);
}

TEST(AcasBackend, ReclaimIsRefusedBeforeAnyServiceCall) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto before = h.service.requests();
    EXPECT_THROW(drive(h.io, sandbox->reclaim("/tmp/x/y", "", Seconds{5})), NotImplemented);
    EXPECT_EQ(h.service.requests(), before);
}

TEST(AcasBackend, AStatPayloadWithoutTheRawFlagsIsRefusedAsIncomplete) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    drive(h.io, sandbox->write_file("f.txt", "x", ""));
    h.service.set_fault([](const net::HttpRequest& request,
                           const std::string& path) -> std::optional<net::HttpResponse> {
        if (path.find("/files/stat") != std::string::npos &&
            request.target.find("f.txt") != std::string::npos) {
            net::HttpResponse r;
            r.body = R"({"name":"f.txt","path":"/x/f.txt","size":1,"isDirectory":false})";
            return r;
        }
        return std::nullopt;
    });
    try {
        drive(h.io, sandbox->stat_file("f.txt", ""));
        FAIL() << "expected AcasEntryPayloadIncomplete";
    } catch (const AcasEntryPayloadIncomplete&) {
    }
}

TEST(AcasBackend, ReadsRefuseLinksAndLinkedAncestorsFromTheRoot) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto base = sandbox->base_directory();
    std::filesystem::create_directories(h.work.path() / "outside");
    std::ofstream(h.work.path() / "outside" / "secret") << "secret";
    std::filesystem::create_directory_symlink(h.work.path() / "outside", base + "/out");
    std::filesystem::create_symlink(h.work.path() / "outside" / "secret", base + "/link");
    EXPECT_THROW(drive(h.io, sandbox->read_file("out/secret", "", 100)), ConfinementEscape);
    EXPECT_THROW(drive(h.io, sandbox->read_file("link", "", 100)), FileError);
    EXPECT_EQ(drive(h.io, sandbox->stat_file("link", ""))->kind, EntryKind::symlink);
    EXPECT_THROW(drive(h.io, sandbox->list_dir("out", "")), ConfinementEscape);
    EXPECT_THROW(drive(h.io, sandbox->stat_file("../outside/secret", "")), ConfinementEscape);
}

TEST(AcasBackend, ScopePurgeReportsUnknownWhileAnAcquireIsActive) {
    Harness h;
    auto backend = h.backend();
    h.service.set_fault([](const net::HttpRequest& request,
                           const std::string& path) -> std::optional<net::HttpResponse> {
        if (request.method == "PUT" && path.size() >= 10 &&
            path.compare(path.size() - 10, 10, "/sandboxes") == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
        return std::nullopt;
    });
    ScopePurge purge;
    auto both = [&]() -> Task<void> {
        using namespace asio::experimental::awaitable_operators;
        auto purge_later = [&]() -> Task<void> {
            asio::steady_timer timer(co_await asio::this_coro::executor);
            timer.expires_after(std::chrono::milliseconds(100));
            co_await timer.async_wait(asio::use_awaitable);
            purge = co_await backend->dispose_scope("scope-1", "thread-1");
        };
        auto acquire = [&]() -> Task<void> { co_await backend->acquire(kKey, h.spec()); };
        co_await (acquire() && purge_later());
    };
    drive(h.io, both());
    ASSERT_TRUE(purge.undisposed);
    EXPECT_EQ(purge.undisposed->code, DisposalCode::unknown);
    EXPECT_EQ(purge.disposed, 0);
}

TEST(AcasBackend, CloseRefusesNewWorkAndLeavesSandboxesRunning) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    drive(h.io, backend->close());
    EXPECT_EQ(h.service.live_sandboxes(), 1u);
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), AcasBackendClosed);
    ExecRequest request;
    request.command = std::string("true");
    EXPECT_THROW(drive(h.io, sandbox->exec(request)), AcasBackendClosed);
}

TEST(AcasBackend, CloseUnderLoadReportsIncompleteCleanup) {
    Harness h;
    auto backend = h.backend([](auto& c) { c.client_close = Seconds{0.2}; });
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    std::exception_ptr closing;
    auto both = [&]() -> Task<void> {
        using namespace asio::experimental::awaitable_operators;
        auto slow = [&]() -> Task<void> {
            ExecRequest request;
            request.command = std::string("sleep 1");
            try {
                co_await sandbox->exec(request);
            } catch (...) {
            }
        };
        auto close_soon = [&]() -> Task<void> {
            asio::steady_timer timer(co_await asio::this_coro::executor);
            timer.expires_after(std::chrono::milliseconds(100));
            co_await timer.async_wait(asio::use_awaitable);
            try {
                co_await backend->close();
            } catch (...) {
                closing = std::current_exception();
            }
        };
        co_await (slow() && close_soon());
    };
    drive(h.io, both());
    ASSERT_TRUE(closing);
    EXPECT_THROW(std::rethrow_exception(closing), AcasClientCloseError);
    EXPECT_EQ(h.service.live_sandboxes(), 1u);
}

TEST(AcasBackend, ThePreviewWarningIsLoggedOnceAtConstructionUnlessSilenced) {
    Harness h;
    auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
    auto log = std::make_shared<spdlog::logger>("acas-test", sink);
    h.backend([&](auto& c) {
        c.log = log;
        c.silence_preview_warning = false;
    });
    EXPECT_EQ(sink->last_formatted().size(), 1u);
    h.backend([&](auto& c) { c.log = log; });
    EXPECT_EQ(sink->last_formatted().size(), 1u);
}

TEST(AcasBackend, PassesTheSharedConformanceSuites) {
    Harness h;
    auto backend = h.backend();
    auto spec = h.spec([](auto& f) {
        f.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out,
                                   Capability::files_list};
    });
    auto sandbox = drive(h.io, backend->acquire(kKey, spec));
    const auto wd = sandbox->base_directory() + "/conformance";
    auto declared = backend->declarations();
    PosixGuestSubject subject(sandbox, wd, declared.capabilities);
    declared.capabilities.erase(Capability::files_delete);  // measured separately below
    const auto results = drive(h.io, run_declared_suites(subject, declared));
    for (const auto& r : results) {
        EXPECT_NE(r.status, ProbeStatus::failed) << r.suite << " " << r.name << ": " << r.detail;
    }
}

}  // namespace
}  // namespace maf_sandbox::acas
