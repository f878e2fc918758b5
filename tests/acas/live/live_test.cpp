// The live suite, mirroring the README's tests/test_acas_e2e.py (docs/acas-rest-api.md 8.2): the
// real data plane, skipped unless ACAS_SANDBOX_ENDPOINT and MAF_SANDBOX_ACAS_E2E_IMAGE name a
// sandbox group and a guest image. Also read: ACAS_SANDBOX_SUBSCRIPTION_ID,
// ACAS_SANDBOX_RESOURCE_GROUP, ACAS_SANDBOX_GROUP, ACAS_SANDBOX_REGISTRY, ACAS_SANDBOX_CA_FILE and
// ACAS_SANDBOX_TOKEN (else the default Azure credential chain); MAF_SANDBOX_ACAS_E2E_PREBUILT
// overrides the prebuilt image (default python-3.13). Most tests share one sandbox; the prebuilt
// probes boot a second. Pointed at an acas-emulator (a loopback endpoint) it runs too, which is how
// it is kept honest offline; the egress measurement needs the real service and skips there.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "loopback.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/core/conformance.hpp"
#include "maf_sandbox/core/host_tools_over_exec.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;

std::string env(const char* name, std::string fallback = {}) {
    const char* value = std::getenv(name);
    return value && *value ? std::string(value) : fallback;
}

bool live_configured() {
    return !env("ACAS_SANDBOX_ENDPOINT").empty() && !env("MAF_SANDBOX_ACAS_E2E_IMAGE").empty();
}

AcasSandboxConfig live_config() {
    AcasSandboxConfig c;
    c.endpoint = env("ACAS_SANDBOX_ENDPOINT");
    c.subscription_id = env("ACAS_SANDBOX_SUBSCRIPTION_ID");
    c.resource_group = env("ACAS_SANDBOX_RESOURCE_GROUP");
    c.sandbox_group = env("ACAS_SANDBOX_GROUP");
    c.registry = env("ACAS_SANDBOX_REGISTRY");
    if (auto ca = env("ACAS_SANDBOX_CA_FILE"); !ca.empty())
        c.ca_file = ca;
    if (auto token = env("ACAS_SANDBOX_TOKEN"); !token.empty())
        c.token = token;
    c.read_timeout = Seconds{20};  // the live suite's bound: a FIFO read must end within it
    c.silence_preview_warning = true;
    return c;
}

// A spec naming `image`: repo:tag (imported) or a bare catalogue name (prebuilt).
SandboxSpec live_spec(const std::string& kind, const std::string& image,
                      std::set<Capability> capabilities) {
    SandboxSpecFields f;
    f.kind = kind;
    f.image = image;
    f.requires_capabilities = std::move(capabilities);
    return SandboxSpec(f);
}

const std::set<Capability> kAll = {Capability::exec, Capability::files_in, Capability::files_out,
                                   Capability::files_list, Capability::host_tools};

class Live : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (!live_configured())
            return;
        shared_ = new Shared;
        shared_->backend = std::make_unique<AcasBackend>(live_config());
        drive(shared_->io, shared_->backend->discover());
        shared_->sandbox = drive(
            shared_->io, shared_->backend->acquire(shared_->key, live_spec("live", image(), kAll)));
    }
    static void TearDownTestSuite() {
        if (!shared_)
            return;
        shared_->sandbox.reset();
        try {
            drive(shared_->io,
                  shared_->backend->dispose_scope(shared_->key.scope, shared_->key.thread_id));
            drive(shared_->io, shared_->backend->close());
        } catch (const std::exception& e) {
            ADD_FAILURE() << "live teardown: " << e.what();
        }
        delete shared_;
        shared_ = nullptr;
    }
    void SetUp() override {
        if (!live_configured()) {
            GTEST_SKIP() << "set ACAS_SANDBOX_ENDPOINT and MAF_SANDBOX_ACAS_E2E_IMAGE to run the "
                            "live suite (every sandbox it creates is billable)";
        }
        ASSERT_TRUE(shared_ && shared_->sandbox) << "the shared live sandbox was not acquired";
    }

    static std::string image() { return env("MAF_SANDBOX_ACAS_E2E_IMAGE"); }
    static std::string prebuilt() { return env("MAF_SANDBOX_ACAS_E2E_PREBUILT", "python-3.13"); }
    static std::string run_id() {
        static const std::string id =
            "live-" + std::to_string(::getpid()) + "-" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
        return id;
    }
    AcasBackend& backend() { return *shared_->backend; }
    Sandbox& sandbox() { return *shared_->sandbox; }
    boost::asio::io_context& io() { return shared_->io; }
    ExecResult sh(const std::string& script, Seconds timeout = Seconds{60}) {
        ExecRequest request;
        request.command = script;
        request.timeout = timeout;
        return drive(io(), sandbox().exec(request));
    }
    // The shared suites in a sandbox of their own: the EXEC timeout probe costs the sandbox on
    // ACAS (a timed-out exec is invalidated and disposed), which must not end the shared one.
    std::vector<ProbeResult> suites(std::set<Capability> gate) {
        const SandboxKey key{"maf-live", run_id(), "live-conformance", ""};
        auto own = drive(io(), backend().acquire(key, live_spec("conformance", image(), kAll)));
        auto declared = backend().declarations();
        declared.capabilities = std::move(gate);
        PosixGuestSubject subject(own, own->base_directory() + "/conformance",
                                  backend().declarations().capabilities);
        auto results = drive(io(), run_declared_suites(subject, declared));
        EXPECT_FALSE(drive(io(), backend().dispose(key, std::nullopt)));
        return results;
    }

    struct Shared {
        boost::asio::io_context io;
        std::unique_ptr<AcasBackend> backend;
        std::shared_ptr<Sandbox> sandbox;
        SandboxKey key{"maf-live", run_id(), "live-agent", ""};
    };
    static Shared* shared_;
};
Live::Shared* Live::shared_ = nullptr;

TEST_F(Live, RoundTripWarmReuseThenAFreshBackendsLabelPurgeDrainsToEmpty) {
    // Its own conversation, so the purge below touches nothing the other tests share.
    const SandboxKey key{"maf-live", run_id() + "-round", "live-agent", ""};
    auto own = drive(io(), backend().acquire(key, live_spec("round", image(), kAll)));
    drive(io(), own->write_file("nested/dir/héllo.txt", "grüße\n", ""));
    ExecRequest cat;
    cat.command = Argv{"cat", "nested/dir/héllo.txt"};
    EXPECT_EQ(drive(io(), own->exec(cat)).stdout_text(), "grüße\n");
    ExecRequest seven;
    seven.command = std::string("exit 7");
    EXPECT_EQ(drive(io(), own->exec(seven)).exit_code, 7);
    const auto id = backend().held_sandbox_id(key, "round");
    drive(io(), backend().acquire(key, live_spec("round", image(), kAll)));
    EXPECT_EQ(backend().held_sandbox_id(key, "round"), id);

    AcasBackend replica(live_config());  // knows nothing in memory
    const auto purge = drive(io(), replica.dispose_scope(key.scope, key.thread_id));
    EXPECT_FALSE(purge.undisposed);
    std::vector<SandboxInfo> left;
    for (int attempt = 0; attempt < 10; ++attempt) {
        left =
            drive(io(), replica.list_sandboxes({{"scope", key.scope}, {"thread", key.thread_id}}));
        if (left.empty())
            break;
        std::this_thread::sleep_for(std::chrono::seconds(6));
    }
    EXPECT_TRUE(left.empty()) << left.size() << " sandbox(es) still listed after the purge";
    drive(io(), replica.close());
}

TEST_F(Live, FilesOutFilesInAndExecSharedProbesPassAgainstTheService) {
    const auto results = suites(
        {Capability::exec, Capability::files_in, Capability::files_out, Capability::files_list});
    int files_list_skipped = 0;
    for (const auto& r : results) {
        EXPECT_NE(r.status, ProbeStatus::failed) << r.suite << " " << r.name << ": " << r.detail;
        if (r.suite == kFilesOutSuite && r.status == ProbeStatus::skipped)
            ++files_list_skipped;
    }
    EXPECT_EQ(files_list_skipped, 0) << "a FILES_LIST-gated FILES_OUT probe was skipped";
}

TEST_F(Live, FilesDeleteEveryProbePassesAgainstTheService) {
    PosixGuestSubject subject(shared_->sandbox, sandbox().base_directory() + "/delete-" + run_id(),
                              backend().declarations().capabilities);
    const auto results = drive(io(), measure_files_delete_probes(subject));
    EXPECT_FALSE(results.empty());
    // Passed, not merely "not skipped": a failed probe is a verdict too, and must fail this test.
    for (const auto& r : results)
        EXPECT_EQ(r.status, ProbeStatus::passed) << r.name << ": " << r.detail;
}

TEST_F(Live, OutputsReadBackByteIdenticalAndAreRefusedOverCapAsDirectoriesAndWhenMissing) {
    const std::string bytes("out\0put\xff", 8);
    drive(io(), sandbox().write_file("outputs/result.bin", bytes, ""));
    const auto entry = drive(io(), sandbox().stat_file("outputs/result.bin", ""));
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->size_bytes, bytes.size());
    EXPECT_EQ(drive(io(), sandbox().read_file("outputs/result.bin", "", 1024)), bytes);
    EXPECT_THROW(drive(io(), sandbox().read_file("outputs/result.bin", "", 4)),
                 SandboxTransferCapExceeded);
    EXPECT_THROW(drive(io(), sandbox().read_file("outputs", "", 1024)), IsADirectory);
    EXPECT_FALSE(drive(io(), sandbox().stat_file("outputs/missing.bin", "")));
    EXPECT_THROW(drive(io(), sandbox().read_file("outputs/missing.bin", "", 1024)), FileNotFound);
}

TEST_F(Live, AFifoReadIsRefusedByTheReadTimeoutInsteadOfHanging) {
    EXPECT_EQ(sh("rm -f fifo && mkfifo fifo").exit_code, 0);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(drive(io(), sandbox().read_file("fifo", "", 1024)), Timeout);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(40));
}

TEST_F(Live, ADotDotWorkingDirectoryConfinesTheSameWay) {
    const auto wd = sandbox().base_directory() + "/../work";
    EXPECT_THROW(drive(io(), sandbox().read_file("../../etc/hostname", wd, 1024)),
                 ConfinementEscape);
}

TEST_F(Live, HostToolsTheGuestHasWhatTheLauncherNeedsAndExecDetaches) {
    EXPECT_EQ(sh("for t in sh nohup printf mv mkdir rm kill; do command -v $t >/dev/null || "
                 "{ echo missing $t; exit 1; }; done")
                  .exit_code,
              0);
    const auto layout =
        guest_run_layout(sandbox().base_directory() + "/detach-" + run_id(), "program.sh");
    drive(io(), sandbox().write_file(layout.program, "sleep 3\necho finished\n", "/"));
    drive(io(), sandbox().write_file(layout.launcher, launcher_script(layout, "sh"), "/"));
    EXPECT_EQ(sh("sh " + shell_quote(layout.launcher)).exit_code, 0);
    EXPECT_FALSE(drive(io(), sandbox().stat_file(layout.exit_code, "/")))
        << "the exit marker existed when the launcher's exec returned";
    std::optional<SandboxEntry> marker;
    for (int attempt = 0; attempt < 30 && !marker; ++attempt) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        marker = drive(io(), sandbox().stat_file(layout.exit_code, "/"));
    }
    EXPECT_TRUE(marker) << "the detached program never wrote its exit code";
}

TEST_F(Live, PrebuiltTheCatalogueListsItAndABareNameBootsAndRuns) {
    const auto images = drive(io(), backend().list_images());
    EXPECT_NE(std::find(images.prebuilt.begin(), images.prebuilt.end(), prebuilt()),
              images.prebuilt.end());
    const SandboxKey key{"maf-live", run_id(), "live-prebuilt", ""};
    auto booted =
        drive(io(), backend().acquire(key, live_spec("prebuilt", prebuilt(), {Capability::exec})));
    ExecRequest request;
    request.command = std::string("echo booted");
    EXPECT_EQ(drive(io(), booted->exec(request)).stdout_text(), "booted\n");
    if (prebuilt().rfind("python", 0) == 0) {
        request.command = std::string("python3 -c 'print(6 * 7)'");
        EXPECT_EQ(drive(io(), booted->exec(request)).stdout_text(), "42\n");
    }
}

TEST_F(Live, EgressAnAllowlistReachesItsHostAndNothingElse) {
    if (live_config().emulator_mode())
        GTEST_SKIP() << "egress enforcement is measured against the real service only";
    const SandboxKey key{"maf-live", run_id(), "live-egress", ""};
    SandboxSpecFields f;
    f.kind = "egress";
    f.image = image();
    f.requires_capabilities = {Capability::exec};
    f.egress = Egress::allowlist;
    f.egress_allow = {"mcr.microsoft.com"};
    auto guarded = drive(io(), backend().acquire(key, SandboxSpec(f)));
    const auto fetch = [&](const std::string& url) {
        ExecRequest request;
        request.command = "curl -sS -o /dev/null -m 20 " + shell_quote(url) +
                          " || wget -q -T 20 -O " + "/dev/null " + shell_quote(url);
        request.timeout = Seconds{60};
        return drive(io(), guarded->exec(request)).exit_code;
    };
    EXPECT_EQ(fetch("https://mcr.microsoft.com/v2/"), 0);
    EXPECT_NE(fetch("https://pypi.org/simple/"), 0);
}

}  // namespace
}  // namespace maf_sandbox::acas
