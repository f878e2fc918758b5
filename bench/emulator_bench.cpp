// The HTTP layer's overhead (issue 5): create-to-Running and the exec round trip through the
// acas-emulator, next to the same operations on the local backend in the same run, so the cost of
// the REST API, TLS and polling reads as a ratio. Counters report HTTP requests per operation.
//
// The emulator is started here (127.0.0.1, port 0, self-signed) from the build's acas-emulator
// and stopped at exit; its sandboxes are deleted through the API. `maf-sandbox bench --only acas_`
// measures the same operations with percentiles, interleaved with the local backend.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/acas/config.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/emulator/emulator_process.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/net/http_client.hpp"

namespace {

namespace json = boost::json;
using maf_sandbox::ExecRequest;
using maf_sandbox::run_blocking;
using maf_sandbox::SandboxKey;
using maf_sandbox::SandboxSpec;
using maf_sandbox::SandboxSpecFields;

const std::string kGroup =
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-bench/sandboxGroups/"
    "bench";
const std::string kApi = "?api-version=2026-02-01-preview";

// The emulator process, a raw HTTPS client shaped like the SDK's, an AcasBackend on it, and a
// local backend for the baseline; everything is removed at exit.
struct Rig {
    std::filesystem::path dir;
    std::unique_ptr<maf_sandbox::emulator::EmulatorProcess> emulator;
    std::string base;
    boost::asio::io_context io;
    std::unique_ptr<maf_sandbox::net::HttpClient> http;
    std::unique_ptr<maf_sandbox::acas::AcasBackend> acas;
    std::unique_ptr<maf_sandbox::local::LocalBackend> local;
    std::size_t raw_requests = 0;

    Rig() {
        std::string pattern = "/tmp/maf-emu-bench-XXXXXX";
        if (mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed");
        }
        dir = pattern;
        emulator = std::make_unique<maf_sandbox::emulator::EmulatorProcess>(
            maf_sandbox::emulator::EmulatorLaunch{
                ACAS_EMULATOR_PATH,
                dir / "emulator",
                {"--self-signed", "--token", "bench-token", "--alias", "python-3.13=host"},
                dir / "emulator.log",
                std::chrono::seconds(30)});
        base = emulator->base_url();
        maf_sandbox::net::HttpClientOptions options;
        options.ca_file = emulator->ca_file().string();
        options.proxy = maf_sandbox::net::ProxySettings{};
        http = std::make_unique<maf_sandbox::net::HttpClient>(io.get_executor(), options);

        maf_sandbox::acas::AcasSandboxConfig config;
        config.endpoint = base;
        config.subscription_id = "00000000-0000-0000-0000-000000000000";
        config.resource_group = "rg-bench";
        config.sandbox_group = "bench";
        config.ca_file = options.ca_file;
        config.token = "bench-token";
        config.emulator = true;
        // The SDK polls every 3 s; a benchmark of the HTTP layer polls as fast as is reasonable.
        config.poll_interval = maf_sandbox::Seconds{0.005};
        config.silence_preview_warning = true;
        acas = std::make_unique<maf_sandbox::acas::AcasBackend>(config);

        maf_sandbox::local::LocalBackendConfig local_config;
        local_config.state_dir = dir / "local";
        local = std::make_unique<maf_sandbox::local::LocalBackend>(local_config);
    }

    ~Rig() {
        try {
            run_blocking(io, acas->dispose_scope("bench", "bench"));
            run_blocking(io, acas->close());
            run_blocking(local->dispose_scope("bench", "bench"));
            delete_all();
        } catch (const std::exception& e) {
            fmt::print(stderr, "cleanup: {}\n", e.what());
        }
        emulator.reset();
        local.reset();
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }

    maf_sandbox::net::HttpResponse call(const std::string& method, const std::string& path,
                                        std::string body = {}) {
        maf_sandbox::net::HttpRequest request;
        request.method = method;
        request.target = base + kGroup + path + kApi;
        request.headers.set("Authorization", "Bearer bench-token");
        request.headers.set("Accept", "application/json");
        if (method == "PUT" || method == "POST") {
            request.headers.set("Content-Type", "application/json");
        }
        request.body = std::move(body);
        ++raw_requests;
        return run_blocking(io, http->send(std::move(request)));
    }

    void delete_all() {
        for (int round = 0; round < 200; ++round) {
            const auto listing = json::parse(call("GET", "/sandboxes").body);
            const auto& value = listing.at("value").as_array();
            if (value.empty()) {
                return;
            }
            for (const auto& s : value) {
                if (s.at("state").as_string() != "Deleting") {
                    call("DELETE", "/sandboxes/" + std::string(s.at("id").as_string()));
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
};

Rig& rig() {
    static Rig instance;  // benchmark-process lifetime only
    return instance;
}

SandboxSpec spec(maf_sandbox::IsolationScope scope, bool acas) {
    SandboxSpecFields fields;
    fields.kind = "bench";
    fields.isolation_scope = scope;
    if (acas) {
        fields.image = "host";
    }
    fields.requires_capabilities = {maf_sandbox::Capability::exec};
    return SandboxSpec(fields);
}

// A shell string on both sides: the service runs every exec with sh -c.
ExecRequest true_request() {
    ExecRequest request;
    request.command = std::string("true");
    return request;
}

// --- baseline: the local backend ---------------------------------------------------------------

void BM_LocalCreate(benchmark::State& s) {
    auto& backend = *rig().local;
    int n = 0;
    for (auto _ : s) {
        const SandboxKey key{"bench", "bench", "local", "call-" + std::to_string(n++)};
        benchmark::DoNotOptimize(
            run_blocking(backend.acquire(key, spec(maf_sandbox::IsolationScope::call, false))));
        s.PauseTiming();
        run_blocking(backend.dispose(key, std::nullopt));
        s.ResumeTiming();
    }
}
BENCHMARK(BM_LocalCreate)->Unit(benchmark::kMillisecond)->Iterations(20)->UseRealTime();

void BM_LocalExecTrue(benchmark::State& s) {
    auto& backend = *rig().local;
    const SandboxKey key{"bench", "bench", "local", ""};
    auto sandbox =
        run_blocking(backend.acquire(key, spec(maf_sandbox::IsolationScope::conversation, false)));
    for (auto _ : s) {
        benchmark::DoNotOptimize(run_blocking(sandbox->exec(true_request())));
    }
}
BENCHMARK(BM_LocalExecTrue)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

// --- through the emulator ------------------------------------------------------------------------

// The wire alone: PUT, then GET every 2 ms until Running (the SDK's poller, faster). Deletion is
// not timed.
void BM_EmulatorCreateToRunning(benchmark::State& s) {
    auto& r = rig();
    const std::string body = R"({"sourcesRef":{"diskImage":{"name":"host","isPublic":true}},)"
                             R"("resources":{"cpu":"1000m","memory":"2048Mi"},)"
                             R"("labels":{"scope":"bench-raw"}})";
    std::size_t requests = 0;
    for (auto _ : s) {
        const auto before = r.raw_requests;
        const auto created = json::parse(r.call("PUT", "/sandboxes", body).body);
        const std::string id(created.at("id").as_string());
        for (;;) {
            const auto got = json::parse(r.call("GET", "/sandboxes/" + id).body);
            const auto state = got.at("state").as_string();
            if (state == "Running") {
                break;
            }
            if (state == "Failed") {
                s.SkipWithError("the sandbox failed to start");
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        requests += r.raw_requests - before;
        s.PauseTiming();
        r.call("DELETE", "/sandboxes/" + id);
        s.ResumeTiming();
    }
    s.counters["requests/op"] =
        benchmark::Counter(static_cast<double>(requests), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_EmulatorCreateToRunning)->Unit(benchmark::kMillisecond)->Iterations(20)->UseRealTime();

// The backend's cold acquire (create, wait for Running, lifecycle policy, acquire probes).
void BM_AcasColdAcquireThroughEmulator(benchmark::State& s) {
    auto& r = rig();
    int n = 0;
    std::size_t requests = 0;
    for (auto _ : s) {
        const SandboxKey key{"bench", "bench", "acas", "call-" + std::to_string(n++)};
        const auto before = r.acas->requests_sent();
        benchmark::DoNotOptimize(run_blocking(
            r.io, r.acas->acquire(key, spec(maf_sandbox::IsolationScope::call, true))));
        requests += r.acas->requests_sent() - before;
        s.PauseTiming();
        run_blocking(r.io, r.acas->dispose(key, std::nullopt));
        s.ResumeTiming();
    }
    s.counters["requests/op"] =
        benchmark::Counter(static_cast<double>(requests), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_AcasColdAcquireThroughEmulator)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20)
    ->UseRealTime();

// One POST executeShellCommand of `true` on a warm sandbox.
void BM_EmulatorRawExecTrue(benchmark::State& s) {
    auto& r = rig();
    const auto created =
        json::parse(r.call("PUT", "/sandboxes",
                           R"({"sourcesRef":{"diskImage":{"name":"host","isPublic":true}},)"
                           R"("labels":{"scope":"bench-raw"}})")
                        .body);
    const std::string id(created.at("id").as_string());
    while (json::parse(r.call("GET", "/sandboxes/" + id).body).at("state").as_string() !=
           "Running") {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (auto _ : s) {
        benchmark::DoNotOptimize(
            r.call("POST", "/sandboxes/" + id + "/executeShellCommand", R"({"command":"true"})"));
    }
    s.counters["requests/op"] = 1;
    r.call("DELETE", "/sandboxes/" + id);
}
BENCHMARK(BM_EmulatorRawExecTrue)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

// The backend's exec of `true` on its warm sandbox.
void BM_AcasExecTrueThroughEmulator(benchmark::State& s) {
    auto& r = rig();
    const SandboxKey key{"bench", "bench", "acas", ""};
    auto sandbox = run_blocking(
        r.io, r.acas->acquire(key, spec(maf_sandbox::IsolationScope::conversation, true)));
    const auto before = r.acas->requests_sent();
    for (auto _ : s) {
        benchmark::DoNotOptimize(run_blocking(r.io, sandbox->exec(true_request())));
    }
    s.counters["requests/op"] = benchmark::Counter(
        static_cast<double>(r.acas->requests_sent() - before), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_AcasExecTrueThroughEmulator)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();

// A warm acquire: the same key again, served from the held sandbox.
void BM_AcasWarmAcquireThroughEmulator(benchmark::State& s) {
    auto& r = rig();
    const SandboxKey key{"bench", "bench", "acas", ""};
    const auto held_spec = spec(maf_sandbox::IsolationScope::conversation, true);
    run_blocking(r.io, r.acas->acquire(key, held_spec));
    const auto before = r.acas->requests_sent();
    for (auto _ : s) {
        benchmark::DoNotOptimize(run_blocking(r.io, r.acas->acquire(key, held_spec)));
    }
    s.counters["requests/op"] = benchmark::Counter(
        static_cast<double>(r.acas->requests_sent() - before), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_AcasWarmAcquireThroughEmulator)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();

SandboxSpec transfer_spec(bool acas) {
    SandboxSpecFields fields;
    fields.kind = "bench-files";
    fields.isolation_scope = maf_sandbox::IsolationScope::conversation;
    if (acas) {
        fields.image = "host";
    }
    fields.requires_capabilities = {maf_sandbox::Capability::exec,
                                    maf_sandbox::Capability::files_in,
                                    maf_sandbox::Capability::files_out};
    fields.files_in = maf_sandbox::acas::kAcasTransferLimits;
    fields.files_out = maf_sandbox::acas::kAcasTransferLimits;
    return SandboxSpec(fields);
}

std::string payload(std::size_t bytes) {
    std::string content(bytes, '\0');
    for (std::size_t i = 0; i < bytes; ++i) {
        content[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);  // binary, not compressible
    }
    return content;
}

// write_file then read_file of the same bytes (checked), on each backend's warm sandbox. The
// ACAS path moves files over exec (base64 chunks), so requests/op is also its guest-command count.
template <bool Acas, bool Read>
void BM_Transfer(benchmark::State& s) {
    auto& r = rig();
    const auto bytes = static_cast<std::size_t>(s.range(0));
    const auto content = payload(bytes);
    const SandboxKey key{"bench", "bench", Acas ? "acas" : "local", "files"};
    std::shared_ptr<maf_sandbox::Sandbox> sandbox =
        Acas ? run_blocking(r.io, r.acas->acquire(key, transfer_spec(true)))
             : run_blocking(r.local->acquire(key, transfer_spec(false)));
    auto run = [&](auto task) {
        if constexpr (Acas) {
            return run_blocking(r.io, std::move(task));
        } else {
            return run_blocking(std::move(task));
        }
    };
    const std::string name = "bench.bin";
    run(sandbox->write_file(name, content, ""));
    std::size_t requests = 0;
    for (auto _ : s) {
        const auto before = Acas ? r.acas->requests_sent() : 0;
        if constexpr (Read) {
            const auto back = run(sandbox->read_file(name, "", bytes));
            if (back != content) {
                s.SkipWithError("read_file returned other bytes");
                return;
            }
        } else {
            run(sandbox->write_file(name, content, ""));
        }
        requests += (Acas ? r.acas->requests_sent() : 0) - before;
    }
    s.SetBytesProcessed(static_cast<std::int64_t>(s.iterations()) *
                        static_cast<std::int64_t>(bytes));
    if constexpr (Acas) {
        s.counters["requests/op"] =
            benchmark::Counter(static_cast<double>(requests), benchmark::Counter::kAvgIterations);
    }
}
BENCHMARK_TEMPLATE(BM_Transfer, false, false)
    ->Name("BM_LocalWrite")
    ->Arg(3 << 10)
    ->Arg(32 << 20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_Transfer, true, false)
    ->Name("BM_AcasWriteThroughEmulator")
    ->Arg(3 << 10)
    ->Arg(32 << 20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_Transfer, false, true)
    ->Name("BM_LocalRead")
    ->Arg(3 << 10)
    ->Arg(32 << 20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_Transfer, true, true)
    ->Name("BM_AcasReadThroughEmulator")
    ->Arg(3 << 10)
    ->Arg(32 << 20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
