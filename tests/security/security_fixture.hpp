// Shared pieces of the security battery: a private state directory, a LocalBackend sandbox with
// the static probe installed through the file API, a host directory of "outside" things a guest
// must never reach, and helpers to run the probe and read its verdict.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/kernel/guest_fs.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "test_dirs.hpp"

#ifndef MAF_SECURITY_PROBE
#error "the build passes the probe's path as MAF_SECURITY_PROBE"
#endif

namespace maf_sandbox::security {

namespace fs = std::filesystem;

inline constexpr const char* kWork = "/maf-sandbox/work";
inline constexpr const char* kProbe = "/maf-sandbox/work/.probe";
inline constexpr Seconds kExecTimeout{30.0};

using TempDir = ::maf_sandbox::testing::TempDir;

// Streamed, not iterated: a /proc file whose process exits mid-read gives a short text, not an
// exception.
inline std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

inline void spit(const fs::path& path, const std::string& content) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

// Host things a guest must never read, change, list or remove: a secret file with a unique
// marker, and a directory holding a victim file and a host-only name.
struct Outside {
    TempDir dir{"maf-sec-outside"};
    std::string marker = fmt::format("HOST-SECRET-{}-{}", ::getpid(), ::time(nullptr));
    fs::path secret = dir.path() / "secret.txt";
    fs::path victim_dir = dir.path() / "victims";
    fs::path victim = victim_dir / "victim";
    std::string victim_content = std::string(12345, 'v');  // a size no guest file has

    Outside() {
        spit(secret, marker);
        fs::create_directories(victim_dir);
        spit(victim, victim_content);
        spit(victim_dir / "host-only-name", "h");
    }
    // True when every outside thing is exactly as it was made.
    bool intact() const {
        std::error_code ec;
        return slurp(secret) == marker && slurp(victim) == victim_content &&
               fs::exists(victim_dir / "host-only-name", ec) &&
               std::distance(fs::directory_iterator(victim_dir), fs::directory_iterator{}) == 2;
    }
};

inline std::string shell_quote(const std::string& text) {
    std::string out = "'";
    for (const char c : text) {
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return out + "'";
}

// A LocalBackend with its own state directory and one acquired sandbox with the probe installed.
class Box {
  public:
    explicit Box(local::LocalBackendConfig config = {}) {
        config.state_dir = state_.path();
        if (config.memory_bytes == local::LocalBackendConfig{}.memory_bytes) {
            config.memory_bytes = 512ull << 20;
        }
        backend_ = std::make_unique<local::LocalBackend>(config);
        SandboxSpecFields fields;
        fields.kind = "security";
        key_ = SandboxKey{"security", fmt::format("t{}", ::getpid()), "agent", ""};
        sandbox_ = run_blocking(backend_->acquire(key_, SandboxSpec(fields)));
        run_blocking(sandbox_->write_file(kProbe, slurp(MAF_SECURITY_PROBE), ""));
        const auto chmod = sh(fmt::format("chmod 0755 {}", kProbe));
        if (chmod.exit_code != 0) {
            throw std::runtime_error("cannot install the probe: " + chmod.stderr_bytes);
        }
    }
    Box(const Box&) = delete;
    Box& operator=(const Box&) = delete;
    ~Box() {
        try {
            run_blocking(backend_->dispose_scope(key_.scope, key_.thread_id));
        } catch (...) {
        }
    }

    Sandbox& sandbox() { return *sandbox_; }
    local::LocalBackend& backend() { return *backend_; }
    const fs::path& state() const { return state_.path(); }

    ExecResult exec(Command command, Seconds timeout = kExecTimeout,
                    std::optional<std::uint64_t> max_output = std::nullopt) {
        ExecRequest request;
        request.command = std::move(command);
        request.timeout = timeout;
        request.max_output_bytes = max_output;
        return run_blocking(sandbox_->exec(request));
    }
    ExecResult sh(const std::string& script, Seconds timeout = kExecTimeout) {
        return exec(script, timeout);
    }
    // Runs the probe with `args` and returns its stdout.
    std::string probe(const std::vector<std::string>& args, Seconds timeout = kExecTimeout) {
        Argv argv{kProbe};
        argv.insert(argv.end(), args.begin(), args.end());
        const auto result = exec(argv, timeout);
        EXPECT_EQ(result.exit_code, 0) << "probe " << args.front() << ": " << result.stderr_bytes;
        return result.stdout_bytes;
    }
    // The errno the probe reports for one attempt; -1 when it reported none (it was killed).
    int errno_of(const std::vector<std::string>& args) {
        const auto out = probe(args);
        int value = -1;
        if (std::sscanf(out.c_str(), "errno %d", &value) != 1) {
            ADD_FAILURE() << "probe " << args.front() << " reported no errno: " << out;
        }
        return value;
    }

    // The registry's handle of the sandbox (for the GuestFs layer and kernel-object checks).
    runtime::SandboxHandle handle() const {
        runtime::Registry registry(state_.path());
        const auto records = registry.list();
        if (records.size() != 1) {
            throw std::runtime_error("expected exactly one sandbox in the state directory");
        }
        return runtime::SandboxHandle::from_runtime_json(
            records[0].supervisor.pid, records[0].supervisor.start_time, records[0].runtime);
    }
    // The sandbox's root through the runtime's own layer (what LocalSandbox uses).
    runtime::GuestFs guest_fs() const {
        const auto h = handle();
        return runtime::GuestFs(runtime::open_sandbox_root(h),
                                runtime::GuestOwner{h.guest_host_uid, h.guest_host_gid});
    }

  private:
    TempDir state_{"maf-sec-state"};
    std::unique_ptr<local::LocalBackend> backend_;
    SandboxKey key_;
    std::shared_ptr<Sandbox> sandbox_;
};

// Read/stat/list/remove through the Sandbox API with the default working directory.
inline std::string api_read(Box& box, const std::string& path, const std::string& wd = "") {
    return run_blocking(box.sandbox().read_file(path, wd, 1 << 20));
}
inline std::optional<SandboxEntry> api_stat(Box& box, const std::string& path,
                                            const std::string& wd = "") {
    return run_blocking(box.sandbox().stat_file(path, wd));
}
inline std::vector<SandboxEntry> api_list(Box& box, const std::string& path,
                                          const std::string& wd = "") {
    return run_blocking(box.sandbox().list_dir(path, wd));
}
inline void api_remove(Box& box, const std::string& path, bool recursive = false,
                       const std::string& wd = "") {
    run_blocking(box.sandbox().remove(path, wd, recursive));
}
inline void api_write(Box& box, const std::string& path, const std::string& content,
                      const std::string& wd = "") {
    run_blocking(box.sandbox().write_file(path, content, wd));
}

}  // namespace maf_sandbox::security
