// The local backend against the kernel's floor and bubblewrap, in one run (issue 3's benchmark):
// posix_spawn + wait of /bin/true, bwrap running /bin/true, our cold acquire (create to first
// output), warm acquire, exec round trip of `true`, and 32 MiB write and read.
#include <benchmark/benchmark.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/local/local_backend.hpp"

extern char** environ;

namespace {

using maf_sandbox::ExecRequest;
using maf_sandbox::run_blocking;
using maf_sandbox::SandboxKey;
using maf_sandbox::SandboxSpec;
using maf_sandbox::SandboxSpecFields;

int spawn_and_wait(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& arg : argv) {
        args.push_back(const_cast<char*>(arg.c_str()));
    }
    args.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) {
        return -1;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// One state directory for the whole run, removed at exit.
struct BenchState {
    std::filesystem::path dir;
    std::unique_ptr<maf_sandbox::local::LocalBackend> backend;
    BenchState() {
        std::string pattern = "/tmp/maf-bench-XXXXXX";
        if (mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed");
        }
        dir = pattern;
        maf_sandbox::local::LocalBackendConfig config;
        config.state_dir = dir;
        backend = std::make_unique<maf_sandbox::local::LocalBackend>(config);
    }
    ~BenchState() {
        run_blocking(backend->dispose_scope("bench", "bench"));
        backend.reset();
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }
};

BenchState& state() {
    static BenchState instance;  // benchmark-process lifetime only
    return instance;
}

SandboxSpec spec(maf_sandbox::IsolationScope scope) {
    SandboxSpecFields fields;
    fields.kind = "bench";
    fields.isolation_scope = scope;
    fields.requires_capabilities = {maf_sandbox::Capability::exec,
                                    maf_sandbox::Capability::files_in};
    return SandboxSpec(fields);
}

ExecRequest true_request() {
    ExecRequest request;
    request.command = maf_sandbox::Argv{"true"};
    return request;
}

void BM_PosixSpawnTrue(benchmark::State& s) {
    for (auto _ : s) {
        benchmark::DoNotOptimize(spawn_and_wait({"/bin/true"}));
    }
}
BENCHMARK(BM_PosixSpawnTrue)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

void BM_BwrapTrue(benchmark::State& s) {
    const std::vector<std::string> argv{"/usr/bin/bwrap", "--ro-bind",     "/usr",
                                        "/usr",           "--symlink",     "usr/bin",
                                        "/bin",           "--symlink",     "usr/lib",
                                        "/lib",           "--symlink",     "usr/lib64",
                                        "/lib64",         "--proc",        "/proc",
                                        "--dev",          "/dev",          "--tmpfs",
                                        "/tmp",           "--unshare-all", "--die-with-parent",
                                        "/bin/true"};
    if (access(argv[0].c_str(), X_OK) != 0) {
        s.SkipWithError("bubblewrap is not installed (scripts/bootstrap installs it)");
        return;
    }
    for (auto _ : s) {
        benchmark::DoNotOptimize(spawn_and_wait(argv));
    }
}
BENCHMARK(BM_BwrapTrue)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

// Create to first output: a fresh call-scoped sandbox, then `true` in it. Disposal is not timed.
void BM_LocalColdAcquireToFirstExec(benchmark::State& s) {
    auto& backend = *state().backend;
    int n = 0;
    for (auto _ : s) {
        const SandboxKey key{"bench", "cold", "bench", "call-" + std::to_string(n++)};
        auto sandbox = run_blocking(backend.acquire(key, spec(maf_sandbox::IsolationScope::call)));
        benchmark::DoNotOptimize(run_blocking(sandbox->exec(true_request())));
        s.PauseTiming();
        run_blocking(backend.dispose(key, std::nullopt));
        s.ResumeTiming();
    }
}
BENCHMARK(BM_LocalColdAcquireToFirstExec)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(30)
    ->UseRealTime();

void BM_LocalWarmAcquire(benchmark::State& s) {
    auto& backend = *state().backend;
    const SandboxKey key{"bench", "bench", "bench", ""};
    run_blocking(backend.acquire(key, spec(maf_sandbox::IsolationScope::conversation)));
    for (auto _ : s) {
        benchmark::DoNotOptimize(
            run_blocking(backend.acquire(key, spec(maf_sandbox::IsolationScope::conversation))));
    }
}
BENCHMARK(BM_LocalWarmAcquire)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

void BM_LocalExecTrue(benchmark::State& s) {
    auto& backend = *state().backend;
    const SandboxKey key{"bench", "bench", "bench", ""};
    auto sandbox =
        run_blocking(backend.acquire(key, spec(maf_sandbox::IsolationScope::conversation)));
    for (auto _ : s) {
        benchmark::DoNotOptimize(run_blocking(sandbox->exec(true_request())));
    }
}
BENCHMARK(BM_LocalExecTrue)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

void BM_LocalWrite32MiB(benchmark::State& s) {
    auto& backend = *state().backend;
    const SandboxKey key{"bench", "bench", "bench", ""};
    auto sandbox =
        run_blocking(backend.acquire(key, spec(maf_sandbox::IsolationScope::conversation)));
    const std::string payload(32u << 20, 'x');
    for (auto _ : s) {
        run_blocking(sandbox->write_file("big.bin", payload, ""));
    }
    s.SetBytesProcessed(static_cast<int64_t>(s.iterations()) *
                        static_cast<int64_t>(payload.size()));
}
BENCHMARK(BM_LocalWrite32MiB)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

void BM_LocalRead32MiB(benchmark::State& s) {
    auto& backend = *state().backend;
    const SandboxKey key{"bench", "bench", "bench", ""};
    auto sandbox =
        run_blocking(backend.acquire(key, spec(maf_sandbox::IsolationScope::conversation)));
    run_blocking(sandbox->write_file("big.bin", std::string(32u << 20, 'x'), ""));
    for (auto _ : s) {
        benchmark::DoNotOptimize(run_blocking(sandbox->read_file("big.bin", "", 64u << 20)));
    }
    s.SetBytesProcessed(static_cast<int64_t>(s.iterations()) * (32 << 20));
}
BENCHMARK(BM_LocalRead32MiB)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
