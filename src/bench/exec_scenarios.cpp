// The local scenarios of one sandbox at a time: exec round trips, warm and cold acquires (with and
// without the backend's pool), a large stdout and the file plane both ways (local_bench.hpp).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "local_bench.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "measure.hpp"

extern char** environ;

namespace maf_sandbox::bench {

namespace fs = std::filesystem;
namespace json = boost::json;

json::object LocalBench::exec_true() {
    auto sandbox = warm_sandbox();
    run_blocking(sandbox->exec(command_request(Argv{"true"})));  // warm the path
    std::vector<double> ours, base;
    for (int i = 0; i < plan_.spawn_pairs; ++i) {
        base.push_back(sample_spawn());
        const auto start = Clock::now();
        const auto result = run_blocking(sandbox->exec(command_request(Argv{"true"})));
        ours.push_back(ms_since(start));
        if (result.exit_code != 0) {
            throw Error(fmt::format("`true` exited {} in the sandbox", result.exit_code));
        }
        if (i % 10 == 0) {
            sample_unshare();
        }
    }
    return scenario("exec_true", "posix_spawn_true", ours, base);
}

// The same with 10 ms of idle time before each pair (untimed), as an agent's execs are spaced
// by its model's turns: the supervisor's preparation of the next exec (fork, cgroup joins,
// seccomp) is then done before it is needed, where the tight loop above also measures it
// competing for the CPU.
json::object LocalBench::exec_true_spaced() {
    auto sandbox = warm_sandbox();
    std::vector<double> ours, base;
    for (int i = 0; i < plan_.spawn_pairs / 3; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        base.push_back(sample_spawn());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        const auto start = Clock::now();
        run_blocking(sandbox->exec(command_request(Argv{"true"})));
        ours.push_back(ms_since(start));
    }
    return scenario("exec_true_spaced", "posix_spawn_true", ours, base);
}

json::object LocalBench::warm_acquire() {
    warm_sandbox();
    std::vector<double> ours, base;
    for (int i = 0; i < plan_.warm_pairs; ++i) {
        base.push_back(sample_spawn());
        const auto start = Clock::now();
        warm_sandbox();
        ours.push_back(ms_since(start));
    }
    return scenario("warm_acquire", "posix_spawn_true", ours, base);
}

json::object LocalBench::cold_acquire() {
    std::vector<double> ours, base;
    for (int i = 0; i < plan_.cold_samples; ++i) {
        if (auto ms = sample_bwrap()) {
            base.push_back(*ms);
        }
        sample_unshare();
        const SandboxKey key{"bench", "cold", "bench", fmt::format("call-{}", i)};
        const auto start = Clock::now();
        auto sandbox = run_blocking(backend_->acquire(key, bench_spec(IsolationScope::call)));
        run_blocking(sandbox->exec(command_request(Argv{"true"})));
        ours.push_back(ms_since(start));
        sandbox.reset();
        run_blocking(backend_->dispose(key, std::nullopt));  // not timed
        settle();
    }
    return scenario("cold_acquire_to_first_output", "bwrap_true", ours, base);
}

// The same, from a backend keeping one pre-built sandbox ready (LocalBackendConfig::
// pool_size). The refill after each take is waited for outside the timed part: this is the
// latency of an acquire that finds the pool full, as it does between an agent's calls.
json::object LocalBench::cold_acquire_pooled() {
    local::LocalBackendConfig config;
    config.state_dir = state_dir_;
    config.pool_size = 1;
    local::LocalBackend pooled(config);
    std::vector<double> ours, base;
    for (int i = -1; i < plan_.pooled_samples; ++i) {
        pooled.wait_for_pool();
        base.push_back(sample_spawn());
        const SandboxKey key{"bench", "pooled", "bench", fmt::format("call-{}", i)};
        const auto start = Clock::now();
        auto sandbox = run_blocking(pooled.acquire(key, bench_spec(IsolationScope::call)));
        run_blocking(sandbox->exec(command_request(Argv{"true"})));
        if (i >= 0) {  // the first acquire finds the pool empty and starts filling it
            ours.push_back(ms_since(start));
        } else {
            base.pop_back();
        }
        sandbox.reset();
        run_blocking(pooled.dispose(key, std::nullopt));  // not timed
        settle();
    }
    return scenario("cold_acquire_pooled_to_first_output", "posix_spawn_true", ours, base);
}

json::object LocalBench::exec_output() {
    auto sandbox = warm_sandbox();
    const std::string head = find_program("head").value_or("/usr/bin/head");
    constexpr std::uint64_t kBytes = 1u << 20;
    std::vector<double> ours, base;
    for (int i = 0; i < plan_.output_samples; ++i) {
        auto start = Clock::now();
        const auto spawned =
            spawn_and_wait({head, "-c", std::to_string(kBytes), "/dev/zero"}, environ, true);
        base.push_back(ms_since(start));
        start = Clock::now();
        const auto result = run_blocking(sandbox->exec(
            command_request(Argv{"head", "-c", std::to_string(kBytes), "/dev/zero"}, 2 * kBytes)));
        ours.push_back(ms_since(start));
        if (result.stdout_bytes.size() != kBytes || spawned.stdout_bytes != kBytes) {
            throw Error(fmt::format("the 1 MiB output came back as {} bytes (baseline {})",
                                    result.stdout_bytes.size(), spawned.stdout_bytes));
        }
    }
    auto out = scenario("exec_1MiB_stdout", "posix_spawn_head_1MiB_to_pipe", ours, base);
    out["bytes"] = kBytes;
    return out;
}

// Time to the first byte of a streamed `echo` in a warm sandbox (the sink's first chunk), next
// to the first byte of `echo` read from posix_spawn's pipe; the bounded exec of the same command
// is sampled in the same rounds, for the ratio of the first streamed byte to the whole round trip.
json::object LocalBench::exec_stream_first_byte() {
    auto sandbox = warm_sandbox();
    const std::string echo = find_program("echo").value_or("/bin/echo");
    run_blocking(sandbox->exec(command_request(Argv{"echo", "x"})));  // warm the path
    std::vector<double> ours, base, bounded;
    for (int i = 0; i < plan_.spawn_pairs; ++i) {
        const auto spawned = spawn_and_wait({echo, "x"}, environ, true);
        if (spawned.first_byte_ms < 0) {
            throw Error("the baseline echo printed nothing");
        }
        base.push_back(spawned.first_byte_ms);
        std::optional<double> first;
        auto start = Clock::now();
        const ExecSink sink = [&first, start](ExecChunk) -> Task<void> {
            if (!first) {
                first = ms_since(start);
            }
            co_return;
        };
        const auto streamed =
            run_blocking(sandbox->exec_stream(command_request(Argv{"echo", "x"}), sink));
        if (!first || streamed.stdout_bytes != "x\n") {
            throw Error("the streamed echo delivered no first chunk");
        }
        ours.push_back(*first);
        start = Clock::now();
        run_blocking(sandbox->exec(command_request(Argv{"echo", "x"})));
        bounded.push_back(ms_since(start));
    }
    auto out = scenario("exec_stream_echo_first_byte", "posix_spawn_echo_first_byte", ours, base);
    const auto round_trip = stats_of(bounded);
    out["bounded_exec_echo"] = to_json(round_trip);
    out["first_byte_over_bounded_p50"] = stats_of(ours).p50 / round_trip.p50;
    return out;
}

// Write then read back through the native file plane, checksummed, next to the same bytes
// written to and read from a host file.
json::object LocalBench::files(std::size_t size, int samples, const std::string& label) {
    auto sandbox = warm_sandbox();
    const std::string payload = random_bytes(size, static_cast<std::uint32_t>(size));
    const auto expected = fnv1a(payload);
    const fs::path host_file = state_dir_ / "host-file.bin";
    std::vector<double> write_ours, read_ours, write_base, read_base;
    bool checksums_ok = true;
    for (int i = 0; i < samples; ++i) {
        auto start = Clock::now();
        {
            std::ofstream out(host_file, std::ios::binary | std::ios::trunc);
            out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
            out.close();
            if (!out) {
                throw SystemError(errno,
                                  fmt::format("writing the baseline file {}", host_file.string()));
            }
        }
        write_base.push_back(ms_since(start));
        start = Clock::now();
        {
            std::ifstream in(host_file, std::ios::binary);
            std::string back(size, '\0');
            in.read(back.data(), static_cast<std::streamsize>(size));
            checksums_ok = checksums_ok && fnv1a(back) == expected;
        }
        read_base.push_back(ms_since(start));
        // write_file takes its bytes by value and callers move a buffer in (codeact, `cp`), so
        // the copy of our payload is made untimed, as the host file is written uncopied.
        std::string content = payload;
        start = Clock::now();
        run_blocking(sandbox->write_file("bench.bin", std::move(content), ""));
        write_ours.push_back(ms_since(start));
        start = Clock::now();
        const auto back = run_blocking(sandbox->read_file("bench.bin", "", size + 1));
        read_ours.push_back(ms_since(start));
        checksums_ok = checksums_ok && back.size() == size && fnv1a(back) == expected;
    }
    std::error_code ec;
    fs::remove(host_file, ec);
    run_blocking(sandbox->remove("bench.bin", "", false));
    if (!checksums_ok) {
        throw Error(fmt::format("the {} file came back with a different checksum", label));
    }
    auto out = scenario("file_write_read_" + label, "host_file_write_read",
                        sum_pairs(write_ours, read_ours), sum_pairs(write_base, read_base));
    const auto mib_per_s = [&](const std::vector<double>& v) {
        return static_cast<double>(size) / (1u << 20) / (stats_of(v).p50 / 1000.0);
    };
    out["bytes"] = size;
    out["checksum_ok"] = checksums_ok;
    out["write_stats"] = to_json(stats_of(write_ours));
    out["read_stats"] = to_json(stats_of(read_ours));
    out["write_mib_per_s_p50"] = mib_per_s(write_ours);
    out["read_mib_per_s_p50"] = mib_per_s(read_ours);
    out["host_write_mib_per_s_p50"] = mib_per_s(write_base);
    out["host_read_mib_per_s_p50"] = mib_per_s(read_base);
    return out;
}

std::vector<double> sum_pairs(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> out;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        out.push_back(a[i] + b[i]);
    }
    return out;
}

}  // namespace maf_sandbox::bench
