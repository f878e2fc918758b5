#include "maf_sandbox/core/conformance.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "conformance_simulated_guest.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox {
namespace {

using testing::CurlSandbox;
using testing::GuestBehaviour;
using testing::SimulatedGuest;
using testing::TimeoutMode;

constexpr const char* kWork = "/maf-sandbox/work";
const std::set<Capability> kOutAndList{Capability::files_out, Capability::files_list};
const std::set<Capability> kEverything{Capability::exec, Capability::files_in,
                                       Capability::files_out, Capability::files_list,
                                       Capability::files_delete};

std::vector<std::string> names_with(const std::vector<ProbeResult>& results, ProbeStatus status) {
    std::vector<std::string> names;
    for (const auto& result : results) {
        if (result.status == status) {
            names.push_back(result.name);
        }
    }
    return names;
}

std::vector<std::string> failed(const std::vector<ProbeResult>& results) {
    return names_with(results, ProbeStatus::failed);
}

const ProbeResult& result_named(const std::vector<ProbeResult>& results, std::string_view name) {
    const auto it = std::find_if(results.begin(), results.end(),
                                 [&](const auto& result) { return result.name == name; });
    if (it == results.end()) {
        throw std::runtime_error("no result named " + std::string(name));
    }
    return *it;
}

std::vector<std::string> probe_names(const std::vector<ConformanceProbe>& probes,
                                     std::initializer_list<int> numbers) {
    std::vector<std::string> names;
    for (const int number : numbers) {
        names.push_back(probes.at(static_cast<std::size_t>(number - 1)).name);
    }
    return names;
}

// A simulated guest behind a PosixGuestSubject: plants go through write_file and `ln -sfn`.
struct GuestSubject {
    explicit GuestSubject(GuestBehaviour behaviour = {},
                          std::set<Capability> capabilities = kEverything, std::string work = kWork)
        : guest(std::make_shared<SimulatedGuest>(behaviour)),
          subject(guest, std::move(work), std::move(capabilities), Seconds{5.0}) {}
    std::shared_ptr<SimulatedGuest> guest;
    PosixGuestSubject subject;
};

struct FakeSubject {
    explicit FakeSubject(std::set<Capability> capabilities = kOutAndList)
        : sandbox(std::make_shared<InProcessSandbox>()),
          subject(sandbox, kWork, std::move(capabilities)) {}
    std::shared_ptr<InProcessSandbox> sandbox;
    InProcessSubject subject;
};

// A subject whose plants do nothing: the positive controls must catch it.
class PlantsNothing : public ConformanceSubject {
  public:
    explicit PlantsNothing(ConformanceSubject& inner) : inner_(inner) {}
    Sandbox& sandbox() override { return inner_.sandbox(); }
    std::string working_directory() const override { return inner_.working_directory(); }
    std::set<Capability> capabilities() const override { return inner_.capabilities(); }
    Task<void> plant_file(std::string, std::string) override { co_return; }
    Task<void> plant_symlink(std::string, std::string) override { co_return; }

  private:
    ConformanceSubject& inner_;
};

// --- FILES_OUT: the passing side -----------------------------------------------------------------

TEST(FilesOutConformance, TheShippedFakeAnswersEveryProbe) {
    FakeSubject fake;
    const auto results = run_blocking(run_files_out_conformance(fake.subject));
    ASSERT_EQ(results.size(), 12u);
    EXPECT_EQ(names_with(results, ProbeStatus::passed).size(), 12u) << results[0].detail;
}

TEST(FilesOutConformance, ASecondIndependentImplementationAnswersThemToo) {
    GuestSubject guest;
    const auto results = run_blocking(run_files_out_conformance(guest.subject));
    EXPECT_TRUE(failed(results).empty()) << failed(results).front();
    EXPECT_EQ(names_with(results, ProbeStatus::passed).size(), 12u);
}

TEST(FilesOutConformance, AssertReturnsTheResultsSoACallerCanCheckWhatWasSkipped) {
    FakeSubject fake;
    const auto results = run_blocking(assert_files_out_conformance(fake.subject));
    ASSERT_EQ(results.size(), 12u);
    for (std::size_t i = 0; i < results.size(); ++i) {
        EXPECT_EQ(results[i].name, files_out_probes()[i].name);
        EXPECT_EQ(results[i].status, ProbeStatus::passed);
        EXPECT_EQ(results[i].suite, "FILES_OUT");
    }
}

// --- FILES_OUT: the failing side -----------------------------------------------------------------

TEST(FilesOutConformance, ABackendThatSkipsTheWalkFailsExactlyTheWalkProbes) {
    GuestSubject leaky({.walks = false});
    const auto results = run_blocking(run_files_out_conformance(leaky.subject));
    EXPECT_EQ(failed(results), probe_names(files_out_probes(), {4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(FilesOutConformance, TheReadProbeSaysTheBytesCameBack) {
    GuestSubject leaky({.walks = false});
    const auto results = run_blocking(run_files_out_conformance(leaky.subject));
    EXPECT_NE(result_named(results, "read-through-a-linked-parent")
                  .detail.find("returned instead of raising"),
              std::string::npos);
}

TEST(FilesOutConformance, ABackendThatCannotNameALinkIsSafeButFailsTheNamingProbes) {
    GuestSubject blind({.names_links = false});
    const auto results = run_blocking(run_files_out_conformance(blind.subject));
    EXPECT_NE(result_named(results, "a-link-is-named-a-link").detail.find("not 'symlink'"),
              std::string::npos);
    for (const auto* name : {"stat-through-a-linked-parent", "read-through-a-linked-parent"}) {
        EXPECT_NE(result_named(results, name).detail.find("raised NotADirectory"),
                  std::string::npos)
            << result_named(results, name).detail;
    }
    EXPECT_EQ(result_named(results, "a-legitimate-read-still-works").status, ProbeStatus::passed);
    EXPECT_EQ(result_named(results, "a-link-is-never-read").status, ProbeStatus::passed);
}

TEST(FilesOutConformance, APositiveControlThatNeverLandedFailsFirst) {
    FakeSubject fake;
    PlantsNothing hollow(fake.subject);
    const auto results = run_blocking(run_files_out_conformance(hollow));
    EXPECT_EQ(results.front().status, ProbeStatus::failed);
}

// --- The runner ----------------------------------------------------------------------------------

TEST(ConformanceRunner, AProbeThatRaisesSomethingOtherThanAnAssertionStillReports) {
    GuestSubject broken({.stat_raises = true});
    const auto results = run_blocking(run_files_out_conformance(broken.subject));
    ASSERT_EQ(results.size(), 12u);
    EXPECT_NE(results[0].detail.find("raised std::runtime_error: the provider fell over"),
              std::string::npos)
        << results[0].detail;
    EXPECT_EQ(result_named(results, "listing-a-linked-directory").status, ProbeStatus::passed);
}

TEST(ConformanceRunner, ACapabilityTheBackendNeverClaimedIsSkippedNotFailed) {
    FakeSubject fake({Capability::files_out});
    const auto results = run_blocking(run_files_out_conformance(fake.subject));
    EXPECT_TRUE(failed(results).empty());
    EXPECT_EQ(names_with(results, ProbeStatus::skipped),
              probe_names(files_out_probes(), {9, 10, 11, 12}));
    for (const auto& result : results) {
        if (result.status == ProbeStatus::skipped) {
            EXPECT_NE(result.detail.find("files_list"), std::string::npos);
        }
    }
}

TEST(ConformanceRunner, ASubjectWithoutTheGateIsRefusedRatherThanSkippedIntoSuccess) {
    FakeSubject fake({Capability::files_list});
    for (auto* run : {&run_files_out_conformance, &assert_files_out_conformance}) {
        try {
            run_blocking(run(fake.subject));
            ADD_FAILURE() << "a subject without FILES_OUT was not refused";
        } catch (const InvalidArgument& refusal) {
            EXPECT_NE(std::string(refusal.what()).find("declares no FILES_OUT"), std::string::npos);
        }
    }
    EXPECT_THROW(run_blocking(run_files_in_conformance(fake.subject)), InvalidArgument);
    EXPECT_THROW(run_blocking(run_exec_conformance(fake.subject)), InvalidArgument);
    EXPECT_THROW(run_blocking(run_files_delete_conformance(fake.subject)), InvalidArgument);
}

TEST(ConformanceRunner, EveryProbeRunsEvenAfterOneFails) {
    GuestSubject leaky({.walks = false});
    const auto results = run_blocking(run_files_out_conformance(leaky.subject));
    EXPECT_EQ(results.size(), 12u);
    EXPECT_GT(failed(results).size(), 1u);
}

TEST(ConformanceRunner, TheFailureNamesEveryProbeAndWhyEachIsInTheSuite) {
    GuestSubject leaky({.walks = false});
    try {
        run_blocking(assert_files_out_conformance(leaky.subject));
        FAIL() << "a leaky backend passed";
    } catch (const ConformanceFailure& failure) {
        const std::string message = failure.what();
        EXPECT_NE(message.find("8 of 12 FILES_OUT conformance probes failed:"), std::string::npos);
        EXPECT_NE(message.find("stat-through-a-linked-parent"), std::string::npos);
        EXPECT_NE(message.find("read-through-a-linked-parent"), std::string::npos);
        EXPECT_NE(message.find("why it is in the suite"), std::string::npos);
        EXPECT_EQ(failed(failure.results()).size(), 8u);
        EXPECT_EQ(failure.suite(), "FILES_OUT");
    }
}

TEST(ConformanceRunner, AFailureIsAnErrorOfTheProjectsHierarchy) {
    GuestSubject leaky({.walks = false});
    EXPECT_THROW(run_blocking(assert_files_out_conformance(leaky.subject)), Error);
}

TEST(ConformanceRunner, EveryProbeSaysWhyItIsInTheSuiteUnderAUniqueName) {
    for (const auto* probes : {&files_out_probes(), &files_in_probes(), &exec_probes(),
                               &files_delete_probes(), &egress_probes()}) {
        std::set<std::string> names;
        for (const auto& probe : *probes) {
            EXPECT_GT(probe.why.size(), 40u) << probe.name;
            EXPECT_TRUE(names.insert(probe.name).second) << probe.name;
            EXPECT_NE(probe.body, nullptr) << probe.name;
        }
    }
    EXPECT_EQ(files_out_probes().size(), 12u);
    EXPECT_EQ(files_in_probes().size(), 12u);
    EXPECT_EQ(exec_probes().size(), 5u);
    EXPECT_EQ(files_delete_probes().size(), 10u);
    EXPECT_EQ(egress_probes().size(), 2u);
}

TEST(ConformanceRunner, ProbesThatVerifyThroughExecDeclareExec) {
    for (const auto* probes : {&files_in_probes(), &files_delete_probes()}) {
        for (const auto& probe : *probes) {
            const bool exempt =
                probe.name == "a-backslash-is-refused" || probe.name == "a-missing-path-is-success";
            EXPECT_EQ(probe.requires_capabilities.count(Capability::exec) == 0, exempt)
                << probe.name;
        }
    }
}

// --- Layout --------------------------------------------------------------------------------------

TEST(ConformancePaths, OutsideIsASiblingThatSharesAPrefixWithTheWorkingDirectory) {
    const auto paths = ConformancePaths::under("/maf-sandbox/work");
    EXPECT_EQ(paths.outside, "/maf-sandbox/work-outside");
    EXPECT_TRUE(paths.outside.starts_with(paths.work));
    EXPECT_EQ(paths.beyond("x"), "../work-outside/x");
    EXPECT_EQ(paths.secret, "/maf-sandbox/work-outside/secret.txt");
    EXPECT_EQ(paths.nested_secret, "/maf-sandbox/work-outside/sub/leaf.txt");
    EXPECT_EQ(paths.under_linked_directory, "/maf-sandbox/work/link-dir/sub");
}

TEST(ConformancePaths, ATrailingSlashOnTheWorkingDirectoryDoesNotChangeTheLayout) {
    const auto plain = ConformancePaths::under("/maf-sandbox/work");
    const auto slashed = ConformancePaths::under("/maf-sandbox/work/");
    EXPECT_EQ(plain.outside, slashed.outside);
    EXPECT_EQ(plain.linked_file, slashed.linked_file);
    EXPECT_EQ(plain.beyond("y"), slashed.beyond("y"));
}

TEST(ConformancePaths, TheBinaryPayloadCarriesEveryAsciiByteAfterTheUnicode) {
    const auto payload = binary_payload();
    EXPECT_TRUE(payload.starts_with("\xc3\xbcn"));
    EXPECT_EQ(payload.back(), '\x7f');
    EXPECT_EQ(payload.find('\n') != std::string::npos, true);
}

// --- FILES_IN ------------------------------------------------------------------------------------

TEST(FilesInConformance, TheSimulatorAnswersEveryProbe) {
    GuestSubject guest;
    const auto results = run_blocking(assert_files_in_conformance(guest.subject));
    EXPECT_EQ(names_with(results, ProbeStatus::passed).size(), 12u);
}

TEST(FilesInConformance, AWriteThatLandsNowhereFailsThePositiveControl) {
    GuestSubject guest({.write_drops = true});
    const auto results = run_blocking(run_files_in_conformance(guest.subject));
    EXPECT_EQ(result_named(results, "a-write-lands-and-reads-back").status, ProbeStatus::failed);
}

TEST(FilesInConformance, AWriteThatTranslatesBytesFailsTheFidelityProbe) {
    GuestSubject guest({.write_translates = true});
    const auto results = run_blocking(run_files_in_conformance(guest.subject));
    EXPECT_EQ(failed(results), std::vector<std::string>{"bytes-survive-the-round-trip"});
}

TEST(FilesInConformance, AWriteThatAppendsFailsTheReplacementProbe) {
    GuestSubject guest({.write_appends = true});
    const auto results = run_blocking(run_files_in_conformance(guest.subject));
    EXPECT_EQ(result_named(results, "a-second-write-replaces").status, ProbeStatus::failed);
    EXPECT_EQ(result_named(results, "a-write-lands-and-reads-back").status, ProbeStatus::passed);
}

TEST(FilesInConformance, ABackendThatSkipsTheWalkLetsWritesEscape) {
    GuestSubject leaky({.walks = false});
    const auto failures = failed(run_blocking(run_files_in_conformance(leaky.subject)));
    for (const auto* name :
         {"a-path-through-a-linked-parent-is-refused",
          "a-linked-destination-is-refused-not-followed", "a-linked-working-directory",
          "a-linked-ancestor-of-the-working-directory"}) {
        EXPECT_NE(std::find(failures.begin(), failures.end(), name), failures.end()) << name;
    }
}

TEST(FilesInConformance, ASubjectWithoutFilesInIsRefused) {
    GuestSubject guest({}, {Capability::exec});
    try {
        run_blocking(run_files_in_conformance(guest.subject));
        FAIL() << "not refused";
    } catch (const InvalidArgument& refusal) {
        EXPECT_NE(std::string(refusal.what()).find("declares no FILES_IN"), std::string::npos);
    }
}

// --- EXEC ----------------------------------------------------------------------------------------

TEST(ExecConformance, TheSimulatorAnswersEveryProbe) {
    GuestSubject guest;
    const auto results = run_blocking(assert_exec_conformance(guest.subject));
    EXPECT_EQ(names_with(results, ProbeStatus::passed).size(), 5u);
}

TEST(ExecConformance, ABackendThatNormalisesExitCodesFailsTheFidelityProbe) {
    GuestSubject guest({.exit_codes = false});
    const auto results = run_blocking(run_exec_conformance(guest.subject));
    EXPECT_EQ(failed(results), std::vector<std::string>{"exit-code-fidelity"});
}

TEST(ExecConformance, ABackendThatJoinsArgvUnquotedFailsTheQuotingProbe) {
    GuestSubject guest({.quoting = false});
    const auto results = run_blocking(run_exec_conformance(guest.subject));
    EXPECT_EQ(failed(results), std::vector<std::string>{"argv-is-quoted"});
}

TEST(ExecConformance, ATimeoutThatReturnsFailsTheLastProbe) {
    GuestSubject guest({.timeout = TimeoutMode::returns});
    const auto results = run_blocking(run_exec_conformance(guest.subject));
    EXPECT_EQ(failed(results), std::vector<std::string>{"a-timeout-raises-timeout-error"});
    EXPECT_NE(results.back().detail.find("returned instead of raising Timeout"), std::string::npos);
}

TEST(ExecConformance, AnInstantTimeoutIsNotTheBoundExpiring) {
    GuestSubject guest({.timeout = TimeoutMode::instant});
    const auto results = run_blocking(run_exec_conformance(guest.subject));
    EXPECT_NE(results.back().detail.find("under half the bound"), std::string::npos);
}

TEST(ExecConformance, ADelayedTimeoutIgnoringTheBoundFailsTheProbe) {
    GuestSubject guest({.timeout = TimeoutMode::late});
    const auto results = run_blocking(run_exec_conformance(guest.subject));
    EXPECT_NE(results.back().detail.find("ignored the caller's timeout"), std::string::npos);
}

TEST(ExecConformance, TheTimeoutProbeIsLast) {
    EXPECT_EQ(exec_probes().back().name, "a-timeout-raises-timeout-error");
}

// --- FILES_DELETE --------------------------------------------------------------------------------

TEST(FilesDeleteConformance, TheSimulatorAnswersEveryProbe) {
    GuestSubject guest;
    const auto results = run_blocking(assert_files_delete_conformance(guest.subject));
    EXPECT_EQ(names_with(results, ProbeStatus::passed).size(), 10u);
}

TEST(FilesDeleteConformance, ARemovalThatDoesNothingFailsThePositiveControl) {
    GuestSubject guest({.remove_inert = true});
    const auto failures = failed(run_blocking(run_files_delete_conformance(guest.subject)));
    for (const auto* name : {"a-removal-removes", "recursive-removes-the-tree"}) {
        EXPECT_NE(std::find(failures.begin(), failures.end(), name), failures.end()) << name;
    }
}

TEST(FilesDeleteConformance, ADestructiveRefusalFailsTheIntactAssertions) {
    GuestSubject guest({.remove_destructive_refusal = true});
    const auto failures = failed(run_blocking(run_files_delete_conformance(guest.subject)));
    EXPECT_EQ(failures, probe_names(files_delete_probes(), {4, 5, 6, 9, 10}));
}

TEST(FilesDeleteConformance, AnOverbroadRemovalFailsTheSentinelAssertions) {
    GuestSubject guest({.remove_overbroad = true});
    const auto results = run_blocking(run_files_delete_conformance(guest.subject));
    EXPECT_NE(result_named(results, "recursive-removes-the-tree").detail.find("beside the tree"),
              std::string::npos);
}

TEST(FilesDeleteConformance, ANonIdempotentRemovalFailsTheMissingPathProbe) {
    GuestSubject guest({.remove_raises_on_missing = true});
    const auto results = run_blocking(run_files_delete_conformance(guest.subject));
    EXPECT_EQ(result_named(results, "a-missing-path-is-success").status, ProbeStatus::failed);
    EXPECT_NE(result_named(results, "a-missing-path-is-success").detail.find("FileNotFound"),
              std::string::npos);
    EXPECT_EQ(result_named(results, "a-removal-removes").status, ProbeStatus::passed);
}

TEST(FilesDeleteConformance, AnEmptyDirectoryCarvedOutFailsTheEmptyProbe) {
    GuestSubject guest({.remove_empty_directory_implicitly = true});
    const auto results = run_blocking(run_files_delete_conformance(guest.subject));
    EXPECT_EQ(result_named(results, "an-empty-directory-needs-recursive").status,
              ProbeStatus::failed);
    EXPECT_EQ(result_named(results, "a-directory-needs-recursive").status, ProbeStatus::passed);
}

TEST(FilesDeleteConformance, ARemovalThatFollowsLinksFailsTheLinkProbe) {
    GuestSubject guest({.remove_follows_links = true});
    const auto results = run_blocking(run_files_delete_conformance(guest.subject));
    EXPECT_EQ(result_named(results, "a-link-is-removed-never-followed").status,
              ProbeStatus::failed);
}

TEST(FilesDeleteConformance, ARecursiveRemovalThatFollowsInteriorLinksFailsTheInteriorProbe) {
    GuestSubject guest({.recursive_follows_interior_links = true});
    const auto results = run_blocking(run_files_delete_conformance(guest.subject));
    EXPECT_EQ(failed(results), std::vector<std::string>{
                                   "a-link-inside-a-recursive-removal-is-unlinked-not-followed"});
}

TEST(FilesDeleteConformance, ABackendThatConfinesOnlyTheNonRecursivePathIsCaught) {
    GuestSubject guest({.recursive_remove_follows_links = true});
    const auto results = run_blocking(run_files_delete_conformance(guest.subject));
    EXPECT_EQ(result_named(results, "a-link-is-removed-never-followed").status,
              ProbeStatus::failed);
}

TEST(FilesDeleteConformance, TheProbesHoldASubjectRootedAnywhere) {
    GuestSubject guest({}, kEverything, "/workspace");
    const auto results = run_blocking(run_files_delete_conformance(guest.subject));
    EXPECT_TRUE(failed(results).empty()) << failed(results).front();
    EXPECT_TRUE(guest.guest->nodes.count("/workspace-outside/target.txt"));
}

TEST(FilesDeleteConformance, ASubjectWithoutFilesDeleteIsRefused) {
    GuestSubject guest({}, {Capability::exec, Capability::files_in});
    try {
        run_blocking(run_files_delete_conformance(guest.subject));
        FAIL() << "not refused";
    } catch (const InvalidArgument& refusal) {
        EXPECT_NE(std::string(refusal.what()).find("declares no FILES_DELETE"), std::string::npos);
    }
}

TEST(FilesDeleteConformance, MeasurementRunsTheProbesWithoutTheGate) {
    GuestSubject guest({}, {Capability::exec, Capability::files_in});
    const auto results = run_blocking(measure_files_delete_probes(guest.subject));
    ASSERT_EQ(results.size(), 10u);
    for (std::size_t i = 0; i < results.size(); ++i) {
        EXPECT_EQ(results[i].name, files_delete_probes()[i].name);
        EXPECT_EQ(results[i].status, ProbeStatus::passed) << results[i].detail;
    }
}

TEST(FilesDeleteConformance, TheShippedFakeRunsOnlyTheProbesThatNeedNoExec) {
    FakeSubject fake({Capability::files_delete, Capability::files_in});
    const auto results = run_blocking(assert_files_delete_conformance(fake.subject));
    EXPECT_EQ(names_with(results, ProbeStatus::passed),
              std::vector<std::string>{"a-missing-path-is-success"});
    EXPECT_EQ(names_with(results, ProbeStatus::skipped).size(), 9u);
}

TEST(FilesDeleteConformance, TheShippedFakeCannotPassExecVerifiedProbesIfItClaimedExec) {
    FakeSubject fake({Capability::files_delete, Capability::exec});
    EXPECT_THROW(run_blocking(assert_files_delete_conformance(fake.subject)), ConformanceFailure);
}

// --- EGRESS --------------------------------------------------------------------------------------

Task<std::vector<ProbeResult>> egress_run(
    std::vector<std::tuple<std::string, int, std::string>> answers, bool asserting) {
    auto sandbox = std::make_shared<CurlSandbox>(std::move(answers));
    PosixGuestSubject subject(sandbox, kWork, {Capability::exec});
    EgressUrls urls{"https://allowed.example/", "https://denied.example/"};
    if (asserting) {
        co_return co_await assert_egress_conformance(subject, urls);
    }
    co_return co_await run_egress_conformance(subject, urls);
}

TEST(EgressConformance, AnL3DenyPasses) {
    const auto results = run_blocking(
        egress_run({{"allowed.example", 0, "200"}, {"denied.example", 7, "000"}}, true));
    EXPECT_EQ(names_with(results, ProbeStatus::passed).size(), 2u);
}

TEST(EgressConformance, AnL7ProxyDenyPasses) {
    const auto results = run_blocking(
        egress_run({{"allowed.example", 0, "200"}, {"denied.example", 0, "403"}}, true));
    EXPECT_EQ(names_with(results, ProbeStatus::passed).size(), 2u);
}

TEST(EgressConformance, AReachableDeniedHostFails) {
    try {
        run_blocking(
            egress_run({{"allowed.example", 0, "200"}, {"denied.example", 0, "200"}}, true));
        FAIL() << "a reachable denied host passed";
    } catch (const ConformanceFailure& failure) {
        EXPECT_NE(std::string(failure.what()).find("a-denied-host-is-refused"), std::string::npos);
    }
}

TEST(EgressConformance, AnUnreachableAllowedHostFails) {
    const auto results = run_blocking(egress_run({{"denied.example", 7, "000"}}, false));
    EXPECT_EQ(failed(results), std::vector<std::string>{"an-allowed-host-is-reachable"});
}

// --- Every declared suite ------------------------------------------------------------------------

TEST(DeclaredSuites, TheFakePassesEveryProbeItDeclaresAndSkipsTheRest) {
    FakeSubject fake(in_process_default_declarations().capabilities);
    const auto results =
        run_blocking(run_declared_suites(fake.subject, in_process_default_declarations()));
    EXPECT_EQ(results.size(), 12u + 12u + 5u + 10u + 2u);
    EXPECT_TRUE(failed(results).empty());
    for (const auto& result : results) {
        if (result.suite == "FILES_OUT") {
            EXPECT_EQ(result.status, ProbeStatus::passed) << result.name;
        }
        if (result.suite == "EXEC" || result.suite == "EGRESS") {
            EXPECT_EQ(result.status, ProbeStatus::skipped) << result.name;
            EXPECT_NE(result.detail.find("does not declare exec"), std::string::npos);
        }
    }
    EXPECT_EQ(result_named(results, "a-backslash-is-refused").status, ProbeStatus::passed);
    // The timeout probe may cost the sandbox, so it comes after every other suite.
    EXPECT_EQ(results.back().name, "a-timeout-raises-timeout-error");
}

TEST(DeclaredSuites, EgressIsSkippedWithoutUrlsAndRunWithThem) {
    GuestSubject guest;
    BackendDeclarations declarations;
    declarations.capabilities = {Capability::exec};
    declarations.egress_modes = {Egress::allowlist};
    const auto without = run_blocking(run_declared_suites(guest.subject, declarations));
    EXPECT_EQ(result_named(without, "an-allowed-host-is-reachable").status, ProbeStatus::skipped);
    EXPECT_NE(result_named(without, "a-denied-host-is-refused").detail.find("no allowed"),
              std::string::npos);
    EXPECT_EQ(result_named(without, "a-legitimate-read-still-works").status, ProbeStatus::skipped);
}

}  // namespace
}  // namespace maf_sandbox
