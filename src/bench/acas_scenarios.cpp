#include "acas_scenarios.hpp"

#include <stdlib.h>

#include <fmt/format.h>
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/acas/config.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/emulator/emulator_process.hpp"
#include "measure.hpp"

namespace maf_sandbox::bench {

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr const char* kToken = "bench-token";
constexpr const char* kScope = "bench";
constexpr const char* kThread = "acas";

// Per scenario. The quick plan keeps the acas part to seconds; a 32 MiB write goes through the
// guest as hundreds of commands, so a quick run has none unless the scenario is named in full.
struct Samples {
    int cold, warm, exec, small_files, big_files;
};

Samples samples_for(bool quick) {
    if (quick) {
        return {20, 200, 100, 30, 0};
    }
    return {200, 2000, 1000, 300, 5};
}

// The same spec on both sides; the emulator maps the `host` image onto the local runtime's.
SandboxSpec spec(IsolationScope scope, bool acas) {
    SandboxSpecFields fields;
    fields.kind = "bench-acas";
    fields.isolation_scope = scope;
    if (acas) {
        fields.image = "host";
    }
    fields.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out};
    fields.files_in = acas::kAcasTransferLimits;
    fields.files_out = acas::kAcasTransferLimits;
    return SandboxSpec(fields);
}

ExecRequest true_request() {
    ExecRequest request;
    request.command = Argv{"true"};
    return request;
}

std::string payload(std::size_t bytes) {
    std::string content(bytes, '\0');
    for (std::size_t i = 0; i < bytes; ++i) {
        content[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);  // binary, not compressible
    }
    return content;
}

// A temporary directory, removed with everything in it.
class TempDir {
  public:
    TempDir() {
        std::string pattern = "/tmp/maf-bench-acas-XXXXXX";
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw SystemError(errno, "creating the ACAS benchmark's state directory",
                              "check that /tmp is writable");
        }
        path_ = pattern;
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    const fs::path& path() const { return path_; }

  private:
    fs::path path_;
};

// The emulator, an AcasBackend on it, and the local backend's keys this bench used. Members are
// destroyed in reverse: the backend's sandboxes are deleted through the API while the emulator
// still runs, then the emulator stops, then its state directory goes.
class Rig {
  public:
    Rig(const fs::path& executable, local::LocalBackend& local, spdlog::logger& log)
        : emulator_(emulator::EmulatorLaunch{
              executable,
              dir_.path() / "emulator",
              {"--self-signed", "--token", kToken, "--alias", "python-3.13=host"},
              dir_.path() / "emulator.log",
              std::chrono::seconds(30)}),
          local_(local),
          log_(log) {
        acas::AcasSandboxConfig config;
        config.endpoint = emulator_.base_url();
        config.subscription_id = "00000000-0000-0000-0000-000000000000";
        config.resource_group = "rg-bench";
        config.sandbox_group = "bench";
        config.ca_file = emulator_.ca_file().string();
        config.token = kToken;
        config.emulator = true;
        // The SDK polls every 3 s; a benchmark of the HTTP layer polls as fast as is reasonable.
        config.poll_interval = Seconds{0.005};
        config.silence_preview_warning = true;
        acas_ = std::make_unique<acas::AcasBackend>(config);
    }
    Rig(const Rig&) = delete;
    Rig& operator=(const Rig&) = delete;

    ~Rig() {
        try {
            run_blocking(local_.dispose_scope(kScope, kThread));
        } catch (const std::exception& e) {
            log_.warn("disposing the ACAS benchmark's local sandboxes: {}", e.what());
        }
        try {
            run_blocking(io_, acas_->dispose_scope(kScope, kThread));
            // Anything the scope missed (a failed dispose): the emulator's sandboxes outlive it.
            for (const auto& info : run_blocking(io_, acas_->list_sandboxes({}))) {
                try {
                    run_blocking(io_, acas_->remove_sandbox(info.id));
                } catch (const std::exception& e) {
                    log_.warn("deleting sandbox {} through the emulator: {}", info.id, e.what());
                }
            }
            wait_until_no_sandbox();
            run_blocking(io_, acas_->close());
        } catch (const std::exception& e) {
            log_.warn("deleting the ACAS benchmark's sandboxes through the emulator: {}", e.what());
        }
    }

    // Runs one of the AcasBackend's operations on the rig's io_context (its clients live there).
    template <typename T>
    T run(Task<T> task) {
        return run_blocking(io_, std::move(task));
    }
    acas::AcasBackend& backend() { return *acas_; }
    local::LocalBackend& local() { return local_; }
    std::size_t requests() const { return acas_->requests_sent(); }

  private:
    // A deletion the service accepted may still be running: the emulator must not stop before its
    // sandboxes (and their supervisors) are gone.
    void wait_until_no_sandbox() {
        const auto deadline = Clock::now() + std::chrono::seconds(20);
        while (!run_blocking(io_, acas_->list_sandboxes({})).empty()) {
            if (Clock::now() > deadline) {
                log_.warn("the emulator still lists sandboxes after 20 s; stopping it anyway");
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }

    TempDir dir_;
    emulator::EmulatorProcess emulator_;
    local::LocalBackend& local_;
    spdlog::logger& log_;
    boost::asio::io_context io_;
    std::unique_ptr<acas::AcasBackend> acas_;
};

// Sums of HTTP requests over the timed operations, divided by their count.
json::object extra(std::size_t requests, std::size_t operations) {
    return json::object{
        {"requests_per_op", static_cast<double>(requests) / static_cast<double>(operations)}};
}

// The kernel tears a disposed sandbox down in the background; the next timed sample should not
// pay for it (the bench's cold loops wait the same).
void settle() {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

AcasScenario cold_acquire(Rig& rig, int samples) {
    AcasScenario out{"acas_cold_acquire", "local_cold_acquire", {}, {}, {}};
    std::size_t requests = 0;
    for (int i = 0; i < samples; ++i) {
        const SandboxKey local_key{kScope, kThread, "local", fmt::format("cold-{}", i)};
        auto start = Clock::now();
        run_blocking(rig.local().acquire(local_key, spec(IsolationScope::call, false)));
        out.base.push_back(ms_since(start));
        run_blocking(rig.local().dispose(local_key, std::nullopt));  // not timed
        settle();

        const SandboxKey key{kScope, kThread, "acas", fmt::format("cold-{}", i)};
        const auto before = rig.requests();
        start = Clock::now();
        rig.run(rig.backend().acquire(key, spec(IsolationScope::call, true)));
        out.ours.push_back(ms_since(start));
        requests += rig.requests() - before;
        rig.run(rig.backend().dispose(key, std::nullopt));  // not timed
        settle();
    }
    out.extra = extra(requests, out.ours.size());
    return out;
}

SandboxKey warm_key(const char* agent_dir) {
    return {kScope, kThread, agent_dir, ""};
}

AcasScenario warm_acquire(Rig& rig, int samples) {
    AcasScenario out{"acas_warm_acquire", "local_warm_acquire", {}, {}, {}};
    const auto local_spec = spec(IsolationScope::conversation, false);
    const auto acas_spec = spec(IsolationScope::conversation, true);
    run_blocking(rig.local().acquire(warm_key("local"), local_spec));
    rig.run(rig.backend().acquire(warm_key("acas"), acas_spec));
    std::size_t requests = 0;
    for (int i = 0; i < samples; ++i) {
        auto start = Clock::now();
        run_blocking(rig.local().acquire(warm_key("local"), local_spec));
        out.base.push_back(ms_since(start));
        const auto before = rig.requests();
        start = Clock::now();
        rig.run(rig.backend().acquire(warm_key("acas"), acas_spec));
        out.ours.push_back(ms_since(start));
        requests += rig.requests() - before;
    }
    out.extra = extra(requests, out.ours.size());
    return out;
}

AcasScenario exec_true(Rig& rig, int samples) {
    AcasScenario out{"acas_exec_true", "local_exec_true", {}, {}, {}};
    auto local = run_blocking(
        rig.local().acquire(warm_key("local"), spec(IsolationScope::conversation, false)));
    auto remote =
        rig.run(rig.backend().acquire(warm_key("acas"), spec(IsolationScope::conversation, true)));
    run_blocking(local->exec(true_request()));  // warm both paths
    rig.run(remote->exec(true_request()));
    std::size_t requests = 0;
    for (int i = 0; i < samples; ++i) {
        auto start = Clock::now();
        const auto base = run_blocking(local->exec(true_request()));
        out.base.push_back(ms_since(start));
        const auto before = rig.requests();
        start = Clock::now();
        const auto ours = rig.run(remote->exec(true_request()));
        out.ours.push_back(ms_since(start));
        requests += rig.requests() - before;
        if (base.exit_code != 0 || ours.exit_code != 0) {
            throw Error(fmt::format("`true` exited {} locally and {} through the emulator",
                                    base.exit_code, ours.exit_code));
        }
    }
    out.extra = extra(requests, out.ours.size());
    return out;
}

// write_file then read_file of the same bytes (compared) on each side's warm sandbox; a sample
// is the pair. Through the emulator files move over exec in base64 chunks, so requests/op also
// counts those commands.
AcasScenario files(Rig& rig, std::size_t size, int samples, const std::string& label) {
    AcasScenario out{"acas_file_write_read_" + label, "local_file_write_read", {}, {}, {}};
    auto local = run_blocking(
        rig.local().acquire(warm_key("local"), spec(IsolationScope::conversation, false)));
    auto remote =
        rig.run(rig.backend().acquire(warm_key("acas"), spec(IsolationScope::conversation, true)));
    const std::string content = payload(size);
    const std::string name = "bench-acas.bin";
    std::size_t requests = 0;
    bool same = true;
    for (int i = 0; i < samples; ++i) {
        // write_file takes its bytes by value: the copies are made untimed.
        std::string copy = content;
        auto start = Clock::now();
        run_blocking(local->write_file(name, std::move(copy), ""));
        auto back = run_blocking(local->read_file(name, "", size + 1));  // as the bench's files
        out.base.push_back(ms_since(start));
        same = same && back == content;
        copy = content;
        const auto before = rig.requests();
        start = Clock::now();
        rig.run(remote->write_file(name, std::move(copy), ""));
        back = rig.run(remote->read_file(name, "", size));  // at most the service's file limit
        out.ours.push_back(ms_since(start));
        requests += rig.requests() - before;
        same = same && back == content;
    }
    run_blocking(local->remove(name, "", false));
    rig.run(remote->remove(name, "", false));
    if (!same) {
        throw Error(fmt::format("the {} file came back with other bytes", label));
    }
    out.extra = extra(requests, out.ours.size());
    out.extra["bytes"] = size;
    return out;
}

}  // namespace

void acas_scenarios(local::LocalBackend& local, const AcasBenchOptions& options,
                    const std::function<void(AcasScenario)>& add, spdlog::logger& log) {
    const auto executable = emulator::emulator_next_to_self();
    if (!executable) {
        log.warn(
            "no acas-emulator next to this executable; the acas_ scenarios are skipped (build "
            "the acas-emulator target)");
        return;
    }
    std::optional<Rig> rig;
    try {
        rig.emplace(*executable, local, log);
    } catch (const std::exception& e) {
        log.warn("the acas-emulator did not start; the acas_ scenarios are skipped: {}", e.what());
        return;
    }
    const Samples n = samples_for(options.quick);
    const bool big_named = std::find(options.only.begin(), options.only.end(),
                                     "acas_file_write_read_32MiB") != options.only.end();
    if (options.wanted("acas_cold_acquire")) {
        add(cold_acquire(*rig, n.cold));
    }
    if (options.wanted("acas_warm_acquire")) {
        add(warm_acquire(*rig, n.warm));
    }
    if (options.wanted("acas_exec_true")) {
        add(exec_true(*rig, n.exec));
    }
    if (options.wanted("acas_file_write_read_3KiB")) {
        add(files(*rig, 3 * 1024, n.small_files, "3KiB"));
    }
    if (options.wanted("acas_file_write_read_32MiB")) {
        if (const int samples = std::max(n.big_files, big_named ? 1 : 0)) {
            add(files(*rig, 32u << 20, samples, "32MiB"));
        }
    }
}

}  // namespace maf_sandbox::bench
