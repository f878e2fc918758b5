// A LocalBackend sandbox with allowlist egress over the tests' own network, with the guest probe
// and the test authority's certificate copied in, and the helpers the battery's cases share:
// running the probe and curl in the guest, reading the proxy's decision log, finding the proxy.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "test_dirs.hpp"
#include "test_network.hpp"

namespace maf_sandbox::egress_testing {

inline constexpr const char* kProbe = "./egress-probe";
inline constexpr const char* kCaFile = "test-ca.pem";

// The allowlist the battery's sandbox is created with.
inline std::vector<std::string> battery_allowlist() {
    return {"allowed.test", "*.wild.test", "ported.test:8080"};
}

// What one probe run reported: its key=value lines and the reply lines ("| ..." without the bar).
struct ProbeOutput {
    std::multimap<std::string, std::string> fields;
    std::vector<std::string> reply;
    std::string raw;
    int exit_code = 0;

    std::string get(const std::string& key) const {
        const auto it = fields.find(key);
        return it == fields.end() ? std::string() : it->second;
    }
    bool replied(const std::string& needle) const {
        return std::any_of(reply.begin(), reply.end(), [&](const std::string& line) {
            return line.find(needle) != std::string::npos;
        });
    }
    // Whether any reply line says a given host served it.
    bool served_by(const std::string& label) const { return replied("served-by=" + label); }
};

// What one curl run in the guest saw: exit code, the final HTTP status (0 when none), the
// proxy's answer to CONNECT for https (0 when there was none), every response head and the body,
// all in `output`.
struct CurlOutput {
    int exit_code = 0;
    int status = 0;
    int connect_status = 0;
    std::string output;
    std::string errors;

    bool contains(const std::string& needle) const {
        return output.find(needle) != std::string::npos;
    }
    bool served_by(const std::string& label) const { return contains("served-by=" + label); }
    // The x-deny-reason header of any response head, lower-cased name; empty when none.
    std::string deny_reason() const {
        std::istringstream lines(output);
        std::string line;
        while (std::getline(lines, line)) {
            std::string lower = line;
            std::transform(lower.begin(), lower.end(), lower.begin(),
                           [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
            if (lower.starts_with("x-deny-reason:")) {
                std::string value = line.substr(14);
                value.erase(0, value.find_first_not_of(' '));
                while (!value.empty() && (value.back() == '\r' || value.back() == ' ')) {
                    value.pop_back();
                }
                return value;
            }
        }
        return {};
    }
    std::string describe() const {
        return fmt::format("curl exit {}, status {}, CONNECT status {}\n{}\n{}", exit_code, status,
                           connect_status, output, errors);
    }
};

using StateDirectory = ::maf_sandbox::testing::TempDir;

struct SandboxOptions {
    Egress mode = Egress::allowlist;
    // The operator's MAF_SANDBOX_EGRESS_ALLOW_PRIVATE switch: the test hosts live at private
    // addresses, so only the cases about address ranges turn it off.
    bool allow_private = true;
    // Run guest commands as root in the sandbox's user namespace.
    bool root_inside = false;
    // The decision log's bounds (the operator's MAF_SANDBOX_EGRESS_LOG_* switches).
    runtime::EgressLogLimits log_limits{};
};

// One sandbox (allowlist egress unless told otherwise) with the probe and the test authority's
// certificate in its working directory; destroyed (with its proxy) with this object.
class EgressSandbox {
  public:
    EgressSandbox(const TestNetwork& network, std::vector<std::string> allow,
                  SandboxOptions options = {})
        : backend_(config_for(state_, network, options)) {
        SandboxSpecFields fields;
        fields.kind = "shell";
        fields.egress = options.mode;
        fields.egress_allow = std::move(allow);
        sandbox_ = run_blocking(backend_.acquire(key(), SandboxSpec(fields)));
        const auto listed = backend_.list({"scope=" + scope()});
        if (listed.size() != 1) {
            throw Error(fmt::format("expected one egress test sandbox, found {}", listed.size()));
        }
        id_ = listed.front().id;
        std::ifstream probe_file(MAF_EGRESS_GUEST_PROBE, std::ios::binary);
        std::string probe((std::istreambuf_iterator<char>(probe_file)),
                          std::istreambuf_iterator<char>());
        if (probe.empty()) {
            throw Error(fmt::format("the guest probe {} is missing; build egress-guest-probe",
                                    MAF_EGRESS_GUEST_PROBE));
        }
        run_blocking(sandbox_->write_file("egress-probe", probe, ""));
        run_blocking(sandbox_->write_file(kCaFile, network.ca_certificate_pem(), ""));
        const auto chmod = shell("chmod 755 egress-probe");
        if (chmod.exit_code != 0) {
            throw Error("could not make the guest probe executable: " + chmod.stderr_bytes);
        }
    }

    ~EgressSandbox() {
        try {
            run_blocking(backend_.dispose_scope(scope(), "battery"));
        } catch (...) {
        }
    }
    EgressSandbox(const EgressSandbox&) = delete;
    EgressSandbox& operator=(const EgressSandbox&) = delete;

    Sandbox& sandbox() { return *sandbox_; }
    const std::filesystem::path& state_dir() const { return state_.path(); }
    std::shared_ptr<Sandbox> shared_sandbox() { return sandbox_; }
    const std::string& id() const { return id_; }
    local::LocalBackend& backend() { return backend_; }

    ExecResult exec(std::vector<std::string> argv, double timeout_seconds = 20.0,
                    std::map<std::string, std::string> environment = {}) {
        ExecRequest request;
        request.command = std::move(argv);
        request.timeout = Seconds{timeout_seconds};
        request.environment = std::move(environment);
        return run_blocking(sandbox_->exec(std::move(request)));
    }
    ExecResult shell(const std::string& script, double timeout_seconds = 20.0) {
        return exec({"sh", "-c", script}, timeout_seconds);
    }

    ProbeOutput probe(std::vector<std::string> args) {
        args.insert(args.begin(), kProbe);
        const auto shown = fmt::format("{}", fmt::join(args, " "));
        const auto result = exec(std::move(args));
        trace(shown, result);
        ProbeOutput out;
        out.raw = result.stdout_bytes + result.stderr_bytes;
        out.exit_code = result.exit_code;
        std::istringstream lines(result.stdout_bytes);
        std::string line;
        while (std::getline(lines, line)) {
            if (line.starts_with("| ")) {
                out.reply.push_back(line.substr(2));
            } else if (const auto eq = line.find('='); eq != std::string::npos) {
                out.fields.emplace(line.substr(0, eq), line.substr(eq + 1));
            }
        }
        return out;
    }

    // curl in the guest with the proxy environment the sandbox was given; `args` go before the
    // URL. Response heads (the proxy's CONNECT answer included) and the body land in `output`.
    CurlOutput curl(const std::string& url, std::vector<std::string> args = {}) {
        std::vector<std::string> argv{
            "curl",       "-sS", "-i",
            "--max-time", "8",   "--cacert",
            kCaFile,      "-w",  "\ncurl-final-status=%{http_code} %{http_connect}\n"};
        argv.insert(argv.end(), args.begin(), args.end());
        argv.push_back(url);
        const auto shown = fmt::format("{}", fmt::join(argv, " "));
        const auto result = exec(std::move(argv));
        trace(shown, result);
        CurlOutput out;
        out.exit_code = result.exit_code;
        out.output = result.stdout_bytes;
        out.errors = result.stderr_bytes;
        const auto at = out.output.rfind("curl-final-status=");
        if (at != std::string::npos) {
            std::istringstream codes(out.output.substr(at + 18));
            codes >> out.status >> out.connect_status;
        }
        return out;
    }

    std::vector<runtime::EgressDecision> decisions() const {
        return backend_.egress_decisions(id_);
    }

    // This sandbox's directory on the host.
    std::filesystem::path sandbox_dir() const {
        return std::filesystem::weakly_canonical(runtime::Registry(state_.path()).sandbox_dir(id_));
    }

    // The pids of this sandbox's egress proxy: processes named maf-egress-proxy (the kernel keeps
    // 15 characters of it) holding a descriptor of this sandbox's own decision log, so never
    // another sandbox's proxy.
    std::vector<pid_t> proxy_pids() const {
        const auto log = runtime::egress_log_path(sandbox_dir());
        std::vector<pid_t> pids;
        std::error_code error;
        for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
            const std::string name = entry.path().filename().string();
            if (name.find_first_not_of("0123456789") != std::string::npos) {
                continue;
            }
            std::ifstream comm(entry.path() / "comm");
            std::string process_name;
            std::getline(comm, process_name);
            if (!std::string_view("maf-egress-proxy").starts_with(process_name) ||
                process_name.size() < 15) {
                continue;
            }
            std::error_code fd_error;
            for (const auto& fd :
                 std::filesystem::directory_iterator(entry.path() / "fd", fd_error)) {
                std::error_code link_error;
                if (std::filesystem::read_symlink(fd.path(), link_error) == log) {
                    pids.push_back(static_cast<pid_t>(std::stoi(name)));
                    break;
                }
            }
        }
        return pids;
    }

  private:
    // MAF_EGRESS_TEST_VERBOSE=1 shows every guest command and what it printed, for debugging a
    // case that passes or fails for the wrong reason.
    static void trace(const std::string& command, const ExecResult& result) {
        if (const char* verbose = std::getenv("MAF_EGRESS_TEST_VERBOSE");
            verbose != nullptr && std::string(verbose) == "1") {
            std::fprintf(stderr, "guest$ %s\n[exit %d]\n%s%s\n", command.c_str(), result.exit_code,
                         result.stdout_bytes.c_str(), result.stderr_bytes.c_str());
        }
    }

    std::string scope() const { return fmt::format("egress-battery-{}", ::getpid()); }
    SandboxKey key() const { return {scope(), "battery", "agent", ""}; }

    static local::LocalBackendConfig config_for(const StateDirectory& state,
                                                const TestNetwork& network,
                                                const SandboxOptions& options) {
        local::LocalBackendConfig config;
        config.root_inside = options.root_inside;
        // A run killed before its teardown leaves a sandbox behind: let it expire soon.
        config.idle_timeout = std::chrono::minutes(10);
        config.max_lifetime = std::chrono::minutes(30);
        config.state_dir = state.path();
        config.memory_bytes = 512ull << 20;
        config.egress_operator.hosts_file = network.hosts_file();
        config.egress_operator.allow_private = options.allow_private;
        config.egress_operator.decision_log = options.log_limits;
        return config;
    }

    StateDirectory state_;
    local::LocalBackend backend_;
    std::shared_ptr<Sandbox> sandbox_;
    std::string id_;
};

// A host name as the proxy compares it: lower-case, without one trailing dot.
inline std::string normalized_host(std::string host) {
    std::transform(host.begin(), host.end(), host.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (!host.empty() && host.back() == '.') {
        host.pop_back();
    }
    return host;
}

// Waits briefly for the proxy to log a decision on `host` with verdict `allowed` after the first
// `since` entries (it may log just after answering) and returns it; nullopt when none came.
inline std::optional<runtime::EgressDecision> await_decision(const EgressSandbox& sandbox,
                                                             std::size_t since,
                                                             const std::string& host,
                                                             bool allowed) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (;;) {
        const auto log = sandbox.decisions();
        for (std::size_t i = since; i < log.size(); ++i) {
            if (log[i].allowed == allowed &&
                normalized_host(log[i].host) == normalized_host(host)) {
                return log[i];
            }
        }
        if (std::chrono::steady_clock::now() > deadline) {
            return std::nullopt;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

inline std::optional<runtime::EgressDecision> await_denial(const EgressSandbox& sandbox,
                                                           std::size_t since,
                                                           const std::string& host) {
    return await_decision(sandbox, since, host, false);
}

inline std::string describe_log(const std::vector<runtime::EgressDecision>& log) {
    std::string out;
    for (const auto& d : log) {
        out += fmt::format("  {} {}:{} {} {}\n", d.method, d.host, d.port,
                           d.allowed ? "allowed" : "denied", d.reason);
    }
    return out.empty() ? "  (empty)\n" : out;
}

}  // namespace maf_sandbox::egress_testing
