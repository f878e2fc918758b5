// A state directory and one running sandbox of the `host` image per test, destroyed afterwards.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "test_dirs.hpp"

namespace maf_sandbox::runtime::testing {

using StateDir = ::maf_sandbox::testing::TempDir;

inline SandboxLaunch host_launch(const std::filesystem::path& state, const std::string& id) {
    ImageStore images(state);
    const MountPlan image = images.resolve(kHostImage);
    SandboxLaunch launch;
    launch.id = id;
    launch.sandbox_dir = state / "sandboxes" / id;
    std::filesystem::create_directories(launch.sandbox_dir);
    launch.mounts = root_plan_for(image, {"/maf-sandbox/work"});
    launch.guest_uid = image.uid;
    launch.guest_gid = image.gid;
    for (const auto& [key, value] : image.env) {
        launch.env.emplace_back(key, value);
    }
    launch.default_cwd = "/maf-sandbox/work";
    launch.limits.pids = 512;
    launch.limits.memory_bytes = 512ull << 20;
    launch.limits.cpus = 1.0;
    return launch;
}

// Kills and removes the sandbox when the test ends, however it ends.
class ScopedSandbox {
  public:
    explicit ScopedSandbox(const SandboxLaunch& launch) : handle_(launch_sandbox(launch)) {}
    ~ScopedSandbox() {
        try {
            destroy_sandbox(handle_);
        } catch (...) {
        }
    }
    ScopedSandbox(const ScopedSandbox&) = delete;
    ScopedSandbox& operator=(const ScopedSandbox&) = delete;
    const SandboxHandle& handle() const { return handle_; }

    ExecReply sh(const std::string& command,
                 std::chrono::milliseconds timeout = std::chrono::seconds(30),
                 std::uint64_t max_output = 1 << 20) const {
        ExecCall call;
        call.command = command;
        call.timeout = timeout;
        call.max_output_bytes = max_output;
        return exec_in_sandbox(handle_, call);
    }

  private:
    SandboxHandle handle_;
};

inline std::string unique_id() {
    static int counter = 0;
    return fmt::format("{:016x}{:08x}{:08x}", static_cast<unsigned long long>(::getpid()),
                       counter++, static_cast<unsigned>(::time(nullptr)));
}

}  // namespace maf_sandbox::runtime::testing
