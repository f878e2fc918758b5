#include "maf_sandbox/core/outputs.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "host_shell_sandbox.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "recording_sandbox.hpp"

namespace maf_sandbox {
namespace {

namespace fs = std::filesystem;
using testing::HostShellSandbox;
using testing::RecordingSandbox;

DeclaredOutput land(std::string path, std::optional<std::string> name = std::nullopt) {
    DeclaredOutput output;
    output.path = std::move(path);
    output.name = std::move(name);
    return output;
}

DeclaredOutput consume(std::string path) {
    DeclaredOutput output;
    output.path = std::move(path);
    output.disposition = OutputDisposition::consume;
    return output;
}

class CollectOutputs : public ::testing::Test {
  protected:
    void plant(const std::string& relative, const std::string& content) {
        const auto path = fs::path(host.base_directory()) / relative;
        fs::create_directories(path.parent_path());
        std::ofstream(path, std::ios::binary) << content;
    }

    SandboxSpec spec(std::vector<DeclaredOutput> outputs,
                     TransferLimits limits = kDefaultTransferLimits,
                     bool named_at_call_time = false) {
        SandboxSpecFields fields;
        fields.kind = "probe";
        fields.work_dir = host.base_directory();
        fields.declared_outputs = std::move(outputs);
        fields.files_out = limits;
        fields.outputs_named_at_call_time = named_at_call_time;
        return SandboxSpec(std::move(fields));
    }

    // A sink that remembers what it was given.
    OutputSink recording_sink(NameNormalization normalization = NameNormalization::nfc) {
        return OutputSink{[this](Artifact artifact) -> Task<LandedArtifact> {
                              delivered.push_back(artifact);
                              co_return LandedArtifact{artifact.name, artifact.name, std::nullopt};
                          },
                          normalization};
    }

    std::vector<LandedArtifact> collect(const SandboxSpec& s, std::optional<OutputSink> sink,
                                        std::vector<DeclaredOutput> outputs = {}) {
        return run_blocking(collect_outputs(recorder, s, std::move(sink), std::move(outputs)));
    }

    HostShellSandbox host;
    RecordingSandbox recorder{host};
    std::vector<Artifact> delivered;
};

TEST_F(CollectOutputs, LandsDeclaredOutputsInDeclarationOrderWithTheirBytes) {
    plant("b.bin", std::string("\x00\x01\xff", 3));
    plant("dir/a.txt", "alpha");
    const auto landed =
        collect(spec({land("b.bin"), land("dir/a.txt", "renamed.txt")}), recording_sink());
    ASSERT_EQ(landed.size(), 2u);
    EXPECT_EQ(landed[0].name, "b.bin");
    EXPECT_EQ(landed[1].name, "renamed.txt");
    ASSERT_EQ(delivered.size(), 2u);
    EXPECT_EQ(delivered[0].content, std::string("\x00\x01\xff", 3));
    EXPECT_EQ(delivered[0].kind, "probe");
    EXPECT_EQ(delivered[1].content, "alpha");
}

TEST_F(CollectOutputs, CallTimeOutputsNeedTheSpecFlag) {
    plant("late.txt", "x");
    EXPECT_THROW(collect(spec({}), recording_sink(), {land("late.txt")}), InvalidArgument);
    const auto landed =
        collect(spec({}, kDefaultTransferLimits, true), recording_sink(), {land("late.txt")});
    ASSERT_EQ(landed.size(), 1u);
    EXPECT_EQ(landed[0].name, "late.txt");
}

TEST_F(CollectOutputs, ALandingOutputWithoutASinkIsRefusedBeforeTheSandboxIsTouched) {
    plant("a.txt", "x");
    EXPECT_THROW(collect(spec({land("a.txt")}), std::nullopt), SandboxOutputSinkRequired);
    EXPECT_TRUE(recorder.stats.empty());
}

TEST_F(CollectOutputs, ConsumedOutputsNeedNoSinkAndAreNeverRead) {
    plant("a.txt", "x");
    EXPECT_TRUE(collect(spec({consume("a.txt")}), std::nullopt).empty());
    EXPECT_EQ(recorder.stats.size(), 1u);
    EXPECT_TRUE(recorder.reads.empty());
}

TEST_F(CollectOutputs, InvalidNamesAreRefusedBeforeTheSandboxIsTouched) {
    EXPECT_THROW(collect(spec({consume("../escape.txt")}), std::nullopt),
                 SandboxArtifactNameInvalid);
    EXPECT_THROW(collect(spec({land("ok.txt", "a//b")}), recording_sink()),
                 SandboxArtifactNameInvalid);
    EXPECT_TRUE(recorder.stats.empty());
}

TEST_F(CollectOutputs, NamesThatDifferOnlyInCaseCollide) {
    try {
        collect(spec({land("Report.txt"), land("other.txt", "report.txt")}), recording_sink());
        FAIL() << "no collision";
    } catch (const SandboxArtifactNameCollision& error) {
        EXPECT_NE(std::string(error.what()).find("letter case"), std::string::npos);
    }
    try {
        collect(spec({land("a.txt"), land("b.txt", "a.txt")}), recording_sink());
        FAIL() << "no collision";
    } catch (const SandboxArtifactNameCollision& error) {
        EXPECT_NE(std::string(error.what()).find("same name"), std::string::npos);
    }
    EXPECT_TRUE(recorder.stats.empty());
}

TEST_F(CollectOutputs, ARequiredOutputMustExistAndAnOptionalOneMayNot) {
    auto optional_output = land("maybe.txt");
    optional_output.required = false;
    EXPECT_TRUE(collect(spec({optional_output}), recording_sink()).empty());
    EXPECT_THROW(collect(spec({land("missing.txt")}), recording_sink()), SandboxOutputMissing);
}

TEST_F(CollectOutputs, OnlyRegularFilesAreCollected) {
    fs::create_directories(fs::path(host.base_directory()) / "a-dir");
    fs::create_symlink("/etc/hostname", fs::path(host.base_directory()) / "a-link");
    EXPECT_THROW(collect(spec({land("a-dir")}), recording_sink()), SandboxOutputNotRegular);
    EXPECT_THROW(collect(spec({land("a-link")}), recording_sink()), SandboxOutputNotRegular);
}

TEST_F(CollectOutputs, AnUnknownSizeFailsClosed) {
    plant("a.txt", "x");
    recorder.adjust_stat = [](std::optional<SandboxEntry>& entry) { entry->size_bytes.reset(); };
    EXPECT_THROW(collect(spec({land("a.txt")}), recording_sink()), SandboxOutputSizeUnknown);
    EXPECT_TRUE(recorder.reads.empty());
}

TEST_F(CollectOutputs, BackendErrorsAreTranslatedIntoTheOutputFamily) {
    const auto outside = host.base_directory() + "-outside";
    fs::create_directories(outside);
    std::ofstream(outside + "/secret.txt") << "secret";
    fs::create_symlink(outside, fs::path(host.base_directory()) / "link-dir");
    plant("plain.txt", "plain");
    EXPECT_THROW(collect(spec({land("link-dir/secret.txt")}), recording_sink()),
                 SandboxOutputNotConfined);
    EXPECT_THROW(collect(spec({land("plain.txt/deeper.txt")}), recording_sink()),
                 SandboxOutputUnreachable);
    fs::remove_all(outside);
}

TEST_F(CollectOutputs, ThePerFileCapIsEnforcedAtStat) {
    plant("big.txt", std::string(11, 'x'));
    EXPECT_THROW(collect(spec({land("big.txt")}, {10, 100, 10}), recording_sink()),
                 SandboxTransferCapExceeded);
    EXPECT_TRUE(recorder.reads.empty());
}

TEST_F(CollectOutputs, TheFileCountCapCountsConsumedOutputs) {
    plant("a.txt", "a");
    plant("b.txt", "b");
    EXPECT_THROW(collect(spec({consume("a.txt"), land("b.txt")}, {10, 100, 1}), recording_sink()),
                 SandboxTransferCapExceeded);
    EXPECT_TRUE(recorder.reads.empty());
}

TEST_F(CollectOutputs, TheTotalCapCountsConsumedOutputsButOnlyLandingOnesAreRead) {
    plant("a.txt", std::string(6, 'a'));
    plant("b.txt", std::string(6, 'b'));
    EXPECT_THROW(collect(spec({consume("a.txt"), land("b.txt")}, {10, 10, 10}), recording_sink()),
                 SandboxTransferCapExceeded);
    recorder.reads.clear();
    const auto landed =
        collect(spec({consume("a.txt"), land("b.txt")}, {10, 12, 10}), recording_sink());
    ASSERT_EQ(landed.size(), 1u);
    ASSERT_EQ(recorder.reads.size(), 1u);
    EXPECT_EQ(recorder.reads[0].first, "b.txt");
}

TEST_F(CollectOutputs, ReadsAskForAtMostTheStatSizeAndTheRemainingTotal) {
    plant("a.txt", std::string(4, 'a'));
    plant("b.txt", std::string(5, 'b'));
    collect(spec({land("a.txt"), land("b.txt")}, {10, 20, 10}), recording_sink());
    ASSERT_EQ(recorder.reads.size(), 2u);
    EXPECT_EQ(recorder.reads[0].second, 4u);
    EXPECT_EQ(recorder.reads[1].second, 5u);
}

TEST_F(CollectOutputs, AFileThatGrewAfterItsStatIsRefusedNotCut) {
    plant("a.txt", "grown bytes");
    recorder.adjust_stat = [](std::optional<SandboxEntry>& entry) { entry->size_bytes = 3; };
    EXPECT_THROW(collect(spec({land("a.txt")}), recording_sink()), SandboxTransferCapExceeded);
    EXPECT_TRUE(delivered.empty());
}

TEST_F(CollectOutputs, ARefusingSinkKeepsWhatWasAlreadyDelivered) {
    plant("a.txt", "a");
    plant("b.txt", "b");
    OutputSink picky{[this](Artifact artifact) -> Task<LandedArtifact> {
        if (artifact.name == "b.txt") {
            throw SandboxLandingExists("b.txt already landed");
        }
        delivered.push_back(artifact);
        co_return LandedArtifact{artifact.name, artifact.name, std::nullopt};
    }};
    EXPECT_THROW(collect(spec({land("a.txt"), land("b.txt")}), picky), SandboxLandingExists);
    ASSERT_EQ(delivered.size(), 1u);
    EXPECT_EQ(delivered[0].name, "a.txt");
}

TEST(ValidateArtifactName, RefusesEachInvalidShape) {
    for (const std::string& name :
         {std::string(""), std::string("a\\b"), std::string("/abs"), std::string("a/../b"),
          std::string(".."), std::string("a//b"), std::string("a/./b"), std::string("a/"),
          std::string("."), std::string("tab\there"), std::string("bad\xff utf8"),
          std::string(256, 'n')}) {
        EXPECT_THROW(validate_artifact_name(name), SandboxArtifactNameInvalid) << name;
    }
}

TEST(ValidateArtifactName, AcceptsOrdinaryNames) {
    for (const std::string& name :
         {std::string("report.txt"), std::string("out/sub/data.bin"), std::string("..hidden"),
          std::string("na\xc3\xafve.txt"), std::string(255, 'n')}) {
        EXPECT_NO_THROW(validate_artifact_name(name)) << name;
    }
}

TEST(LandingOutputs, SelectsLandingOutputsAndSaysWhetherASpecLands) {
    SandboxSpecFields fields;
    fields.kind = "probe";
    fields.declared_outputs = {consume("a"), land("b")};
    const SandboxSpec lands(fields);
    ASSERT_EQ(landing_outputs(lands).size(), 1u);
    EXPECT_EQ(landing_outputs(lands)[0].path, "b");
    EXPECT_TRUE(spec_lands_artifacts(lands));
    fields.declared_outputs = {consume("a")};
    EXPECT_FALSE(spec_lands_artifacts(SandboxSpec(fields)));
    fields.outputs_named_at_call_time = true;
    EXPECT_TRUE(spec_lands_artifacts(SandboxSpec(fields)));
}

class FileSystemSink : public ::testing::Test {
  protected:
    void SetUp() override {
        root = fs::path(::testing::TempDir()) /
               ("maf-sink-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root);
        fs::create_directories(root);
    }
    void TearDown() override { fs::remove_all(root); }
    fs::path root;
};

TEST_F(FileSystemSink, LandsBinaryBytesUnderTheRootAndDescribesThem) {
    auto sink = make_file_system_sink(root);
    const std::string bytes("\x00\r\n\xff", 4);
    const auto landed = run_blocking(sink.deliver(Artifact{"sub/out.bin", bytes, "probe", {}}));
    EXPECT_EQ(landed.display, "sub/out.bin (4 bytes)");
    std::ifstream in(root / "sub/out.bin", std::ios::binary);
    const std::string read((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(read, bytes);
    ASSERT_TRUE(landed.handle);
}

TEST_F(FileSystemSink, RefusesADestinationThatALinkTakesOutsideTheRoot) {
    const auto elsewhere = root.string() + "-elsewhere";
    fs::create_directories(elsewhere);
    fs::create_symlink(elsewhere, root / "escape");
    auto sink = make_file_system_sink(root);
    try {
        run_blocking(sink.deliver(Artifact{"escape/out.txt", "x", "probe", {}}));
        FAIL() << "landed outside the root";
    } catch (const SandboxLandingNotConfined& error) {
        EXPECT_EQ(std::string(error.what()).find(root.string()), std::string::npos);
        EXPECT_EQ(std::string(error.what()).find(elsewhere), std::string::npos);
    }
    EXPECT_FALSE(fs::exists(fs::path(elsewhere) / "out.txt"));
    fs::remove_all(elsewhere);
}

TEST_F(CollectOutputs, LandsIntoAFileSystemSinkEndToEnd) {
    plant("out/report.txt", "report");
    const auto root = fs::path(host.base_directory() + "-landing");
    const auto landed = collect(spec({land("out/report.txt")}), make_file_system_sink(root));
    ASSERT_EQ(landed.size(), 1u);
    EXPECT_EQ(landed[0].display, "out/report.txt (6 bytes)");
    EXPECT_TRUE(fs::is_regular_file(root / "out/report.txt"));
    fs::remove_all(root);
}

}  // namespace
}  // namespace maf_sandbox
