#include "maf_sandbox/core/in_process.hpp"

#include <gtest/gtest.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox {
namespace {

constexpr const char* kWork = "/maf-sandbox/work";

InProcessSandboxOptions seeded(std::vector<std::pair<std::string, SeedEntry>> seeds) {
    InProcessSandboxOptions options;
    options.seed_files = std::move(seeds);
    return options;
}

SandboxSpec spec_with(std::optional<std::string> work_dir = std::nullopt) {
    SandboxSpecFields fields;
    fields.kind = "probe";
    fields.work_dir = std::move(work_dir);
    return SandboxSpec(std::move(fields));
}

TEST(InProcessSandbox, SeedFilesLandInTheirStoresByKind) {
    InProcessSandbox sandbox(seeded({{"/w/a.txt", std::string("text")},
                                     {"/w/link", EntryKind::symlink},
                                     {"/w/dir", EntryKind::directory},
                                     {"/w/fifo", EntryKind::other}}));
    EXPECT_EQ(sandbox.contents().at("/w/a.txt"), "text");
    EXPECT_TRUE(sandbox.symlinks().count("/w/link"));
    EXPECT_TRUE(sandbox.directories().count("/w/dir"));
    EXPECT_TRUE(sandbox.non_regular().count("/w/fifo"));
}

TEST(InProcessSandbox, AWriteStoresBytesVerbatimAndASecondReplaces) {
    InProcessSandbox sandbox;
    const std::string bytes("a\r\nb\0c", 6);
    run_blocking(sandbox.write_file("sub/f.bin", bytes, kWork));
    EXPECT_EQ(sandbox.contents().at("/maf-sandbox/work/sub/f.bin"), bytes);
    run_blocking(sandbox.write_file("sub/f.bin", "second", kWork));
    EXPECT_EQ(run_blocking(sandbox.read_file("sub/f.bin", kWork, 100)), "second");
}

TEST(InProcessSandbox, ARelativeWorkingDirectoryResolvesBeneathTheBase) {
    InProcessSandbox sandbox;
    run_blocking(sandbox.write_file("f.txt", "x", "call"));
    EXPECT_TRUE(sandbox.contents().count("/maf-sandbox/work/call/f.txt"));
    run_blocking(sandbox.write_file("g.txt", "y", ""));
    EXPECT_TRUE(sandbox.contents().count("/maf-sandbox/work/g.txt"));
}

TEST(InProcessSandbox, WritesAreConfined) {
    InProcessSandbox sandbox(
        seeded({{"/w/link", EntryKind::symlink}, {"/w/plain", std::string("p")}}));
    EXPECT_THROW(run_blocking(sandbox.write_file("../x", "x", "/w")), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.write_file(".", "x", "/w")), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.write_file("link", "x", "/w")), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.write_file("link/x", "x", "/w")), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.write_file("plain/x", "x", "/w")), NotADirectory);
    EXPECT_THROW(run_blocking(sandbox.write_file("a\\b", "x", "/w")), ConfinementEscape);
    EXPECT_EQ(sandbox.contents().size(), 1u);
}

TEST(InProcessSandbox, StatDescribesEachKindRelativeToTheWorkingDirectory) {
    InProcessSandbox sandbox(seeded({{"/w/a/f.txt", std::string("four")},
                                     {"/w/link", EntryKind::symlink},
                                     {"/w/fifo", EntryKind::other}}));
    EXPECT_EQ(run_blocking(sandbox.stat_file("a/f.txt", "/w")),
              (SandboxEntry{"a/f.txt", EntryKind::file, 4}));
    EXPECT_EQ(run_blocking(sandbox.stat_file("a", "/w")),
              (SandboxEntry{"a", EntryKind::directory, std::nullopt}));
    EXPECT_EQ(run_blocking(sandbox.stat_file("link", "/w")),
              (SandboxEntry{"link", EntryKind::symlink, std::nullopt}));
    EXPECT_EQ(run_blocking(sandbox.stat_file("fifo", "/w")),
              (SandboxEntry{"fifo", EntryKind::other, std::nullopt}));
    EXPECT_EQ(run_blocking(sandbox.stat_file("missing", "/w")), std::nullopt);
}

TEST(InProcessSandbox, ReadRefusesEverythingButARegularFileWithinTheCap) {
    InProcessSandbox sandbox(seeded({{"/w/f.txt", std::string("12345")},
                                     {"/w/link", EntryKind::symlink},
                                     {"/w/fifo", EntryKind::other},
                                     {"/w/dir", EntryKind::directory}}));
    EXPECT_EQ(run_blocking(sandbox.read_file("f.txt", "/w", 5)), "12345");
    EXPECT_THROW(run_blocking(sandbox.read_file("f.txt", "/w", 4)), SandboxTransferCapExceeded);
    EXPECT_THROW(run_blocking(sandbox.read_file("link", "/w", 100)), FileError);
    EXPECT_THROW(run_blocking(sandbox.read_file("fifo", "/w", 100)), FileError);
    EXPECT_THROW(run_blocking(sandbox.read_file("dir", "/w", 100)), IsADirectory);
    EXPECT_THROW(run_blocking(sandbox.read_file("missing", "/w", 100)), FileNotFound);
    EXPECT_THROW(run_blocking(sandbox.read_file("link/x", "/w", 100)), ConfinementEscape);
}

TEST(InProcessSandbox, AListingNamesImmediateChildrenSortedWithLinks) {
    InProcessSandbox sandbox(seeded({{"/w/b.txt", std::string("b")},
                                     {"/w/a/deep/grandchild", std::string("g")},
                                     {"/w/link", EntryKind::symlink},
                                     {"/w/empty", EntryKind::directory},
                                     {"/w-outside/x", std::string("x")}}));
    const auto listing = run_blocking(sandbox.list_dir(".", "/w"));
    const std::vector<SandboxEntry> expected{{"a", EntryKind::directory, std::nullopt},
                                             {"b.txt", EntryKind::file, 1},
                                             {"empty", EntryKind::directory, std::nullopt},
                                             {"link", EntryKind::symlink, std::nullopt}};
    EXPECT_EQ(listing, expected);
    EXPECT_THROW(run_blocking(sandbox.list_dir("link", "/w")), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.list_dir("b.txt", "/w")), NotADirectory);
}

TEST(InProcessSandbox, RemovalIsIdempotentUnlinksLinksAndNeedsRecursiveForDirectories) {
    InProcessSandbox sandbox(seeded({{"/w/f.txt", std::string("f")},
                                     {"/w/link", EntryKind::symlink},
                                     {"/w/tree/leaf", std::string("l")},
                                     {"/w/tree-sibling", std::string("s")},
                                     {"/w/empty", EntryKind::directory}}));
    run_blocking(sandbox.remove("f.txt", "/w", false));
    run_blocking(sandbox.remove("f.txt", "/w", false));
    EXPECT_FALSE(sandbox.contents().count("/w/f.txt"));
    run_blocking(sandbox.remove("link", "/w", true));
    EXPECT_FALSE(sandbox.symlinks().count("/w/link"));
    EXPECT_THROW(run_blocking(sandbox.remove("tree", "/w", false)), FileError);
    EXPECT_THROW(run_blocking(sandbox.remove("empty", "/w", false)), FileError);
    run_blocking(sandbox.remove("tree", "/w", true));
    EXPECT_FALSE(sandbox.contents().count("/w/tree/leaf"));
    EXPECT_TRUE(sandbox.contents().count("/w/tree-sibling"));
    EXPECT_THROW(run_blocking(sandbox.remove(".", "/w", true)), ConfinementEscape);
    EXPECT_THROW(run_blocking(sandbox.remove("../w-x", "/w", true)), ConfinementEscape);
}

TEST(InProcessSandbox, ExecIsScriptedByTheFirstMatchingMarkerAndRecorded) {
    InProcessSandboxOptions options;
    options.outputs = {{"python3", ExecResult{"py", "", 0}},
                       {"py", ExecResult{"never", "", 0}},
                       {"fail", ExecResult{"", "boom", 3}}};
    options.default_stdout = "default";
    InProcessSandbox sandbox(options);
    ExecRequest request;
    request.command = Argv{"python3", "a b.py"};
    request.working_directory = "/w";
    const auto result = run_blocking(sandbox.exec(request));
    EXPECT_EQ(result.stdout_bytes, "py");
    ASSERT_EQ(sandbox.commands().size(), 1u);
    EXPECT_EQ(sandbox.commands()[0].command, "'python3' 'a b.py'");
    EXPECT_EQ(sandbox.commands()[0].working_directory, "/w");
    request.command = std::string("please fail");
    EXPECT_EQ(run_blocking(sandbox.exec(request)).exit_code, 3);
    request.command = std::string("other");
    EXPECT_EQ(run_blocking(sandbox.exec(request)).stdout_bytes, "default");
    EXPECT_EQ(run_blocking(sandbox.run_code("print(1) # python3", Seconds{2})).stdout_bytes, "py");
    EXPECT_EQ(sandbox.programs().size(), 1u);
}

TEST(InProcessSandbox, ExecRaisesTheScriptedErrorAfterRecording) {
    InProcessSandboxOptions options;
    options.raises = std::make_exception_ptr(Timeout("scripted timeout"));
    InProcessSandbox sandbox(options);
    ExecRequest request;
    request.command = std::string("sleep 9");
    EXPECT_THROW(run_blocking(sandbox.exec(request)), Timeout);
    EXPECT_EQ(sandbox.commands().size(), 1u);
}

TEST(InProcessSandbox, ReclaimIsNotImplementedAndTouchesNothing) {
    InProcessSandbox sandbox(seeded({{"/w/call/f", std::string("f")}}));
    EXPECT_THROW(run_blocking(sandbox.reclaim("/w/call", "/w", Seconds{1})), NotImplemented);
    EXPECT_TRUE(sandbox.contents().count("/w/call/f"));
}

TEST(InProcessSandboxBackend, DeclaresFilesButNotExecAndBothScopes) {
    InProcessSandboxBackend backend;
    EXPECT_EQ(backend.name(), "in-process");
    EXPECT_EQ(backend.isolation(), Isolation::none);
    const auto declarations = backend.declarations();
    EXPECT_EQ(declarations.capabilities,
              (std::set<Capability>{Capability::files_in, Capability::files_out,
                                    Capability::files_list, Capability::files_delete}));
    EXPECT_EQ(declarations.egress_modes, (std::set<Egress>{Egress::allowlist, Egress::closed}));
    EXPECT_EQ(declarations.isolation_scopes,
              (std::set<IsolationScope>{IsolationScope::conversation, IsolationScope::call}));
}

TEST(InProcessSandboxBackend, AcquireRecordsAndHandsOutTheSharedSandboxAtTheSpecsWorkDir) {
    auto sandbox = std::make_shared<InProcessSandbox>();
    InProcessSandboxBackend backend(sandbox);
    const SandboxKey key{"s", "t", "a", ""};
    const auto first = run_blocking(backend.acquire(key, spec_with()));
    EXPECT_EQ(first.get(), sandbox.get());
    EXPECT_EQ(first->base_directory(), kWork);
    const auto second = run_blocking(backend.acquire({"s", "t2", "a", ""}, spec_with("/srv/x/")));
    EXPECT_EQ(second.get(), sandbox.get());
    EXPECT_EQ(second->base_directory(), "/srv/x");
    ASSERT_EQ(backend.keys().size(), 2u);
    EXPECT_EQ(backend.keys()[0], key);
    EXPECT_EQ(backend.specs()[1]->work_dir, "/srv/x/");
}

TEST(InProcessSandboxBackend, AnAcquireErrorIsThrownAndNothingRecorded) {
    InProcessBackendOptions options;
    options.acquire_error = std::make_exception_ptr(SandboxCleanupPending("pending cleanup"));
    InProcessSandboxBackend backend(nullptr, options);
    EXPECT_THROW(run_blocking(backend.acquire({"s", "t", "a", ""}, spec_with())),
                 SandboxCleanupPending);
    EXPECT_TRUE(backend.keys().empty());
}

TEST(InProcessSandboxBackend, DeclarationsAreOverridable) {
    InProcessBackendOptions options;
    options.name = "weak";
    options.isolation = Isolation::container;
    options.declarations.capabilities = {Capability::exec};
    InProcessSandboxBackend backend(nullptr, options);
    EXPECT_EQ(backend.name(), "weak");
    EXPECT_EQ(backend.isolation(), Isolation::container);
    EXPECT_TRUE(backend.declarations().declares(Capability::exec));
}

TEST(InProcessSandboxBackend, DisposalAndPurgeAreRecorded) {
    InProcessSandboxBackend backend;
    const SandboxKey key{"s", "t", "a", ""};
    EXPECT_EQ(run_blocking(backend.dispose(key, std::string("kind"))), std::nullopt);
    backend.set_purge_count(3);
    EXPECT_EQ(run_blocking(backend.dispose_scope("s", "t")).disposed, 3);
    ASSERT_EQ(backend.disposed().size(), 1u);
    EXPECT_EQ(backend.disposed()[0].kind, "kind");
    EXPECT_EQ(backend.purged(), (std::vector<std::pair<std::string, std::string>>{{"s", "t"}}));
}

TEST(InProcessSandboxBackend, AClosedBackendRefusesNewWork) {
    InProcessSandboxBackend backend;
    run_blocking(backend.close());
    EXPECT_TRUE(backend.closed());
    EXPECT_THROW(run_blocking(backend.acquire({"s", "t", "a", ""}, spec_with())), Error);
}

}  // namespace
}  // namespace maf_sandbox
