// Internal: what the emulator needs from something that runs sandboxes. The service only sees this
// interface; runtime_engine.cpp implements it over the local runtime (src/runtime).
#pragma once

#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "guest_authority.hpp"
#include "maf_sandbox/core/vocabulary.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::emulator {

struct LaunchRequest {
    std::string id;     // the sandbox id (a GUID)
    std::string image;  // a local image reference ("host", "acas-img-…:latest")
    std::map<std::string, std::string> environment;
    double cpus = 0;                 // 0: unlimited
    std::uint64_t memory_bytes = 0;  // 0: unlimited
    // What the sandbox's egressPolicy compiles to (egress_policy.cpp); the operator switches
    // (MAF_SANDBOX_EGRESS_*) come from the emulator's own environment.
    runtime::EgressPolicy egress;
};

// exec's working directory does not exist, is not a directory, or the image's user may not enter
// it: the caller's mistake, answered 400 (never a 5xx, which clients retry).
struct UnusableWorkingDirectory : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct EngineExec {
    int exit_code = 0;
    bool timed_out = false;
    std::string stdout_head;
    std::string stderr_head;
    std::uint64_t stdout_total = 0;
    std::uint64_t stderr_total = 0;
};

// Every method blocks; callers run them on worker threads. Handles are JSON so they persist in
// the emulator's state and survive a restart of the emulator (sandboxes outlive it).
class SandboxEngine {
  public:
    virtual ~SandboxEngine() = default;

    // The rung this engine really provides on this machine.
    virtual Isolation isolation() const = 0;

    virtual bool has_image(const std::string& image) const = 0;
    // Imports an archive (rootfs tarball, docker save or OCI layout) as `image`.
    virtual void import_image(const std::filesystem::path& archive, const std::string& image) = 0;
    virtual void remove_image(const std::string& image) = 0;

    // Starts a sandbox and returns its handle. Throws Error saying why it could not.
    virtual boost::json::object launch(const LaunchRequest& request) = 0;
    virtual bool alive(const boost::json::object& handle) const = 0;
    // Ends every process of the sandbox and removes its files. Idempotent.
    virtual void destroy(const boost::json::object& handle) = 0;

    // Freezes (stop, suspend) or thaws (resume) every process of the sandbox. Throws Error when
    // the machine cannot freeze it.
    virtual void freeze(const boost::json::object& handle, bool frozen) = 0;

    // Runs `command` with sh -c as the image's user, in `cwd` ("" = the image's default), with
    // the service's semantics: it answers at EOF of the command's stdout and stderr (a background
    // child holding them is waited for, within `timeout`), and a stream passing
    // `max_output_bytes` kills the command's tree. Throws UnusableWorkingDirectory when `cwd`
    // cannot be entered.
    virtual EngineExec exec(const boost::json::object& handle, const std::string& command,
                            const std::string& cwd, std::chrono::milliseconds timeout,
                            std::uint64_t max_output_bytes) = 0;

    // The sandbox's user and mount namespaces and its root, for the file plane's guest-authority
    // child. Throws Error when the sandbox is gone.
    virtual GuestAuthority open_authority(const boost::json::object& handle) = 0;
};

// The local runtime, keeping its images and sandbox directories under `runtime_dir`.
// A disk-image import is refused past `image_limits`.
std::unique_ptr<SandboxEngine> make_runtime_engine(std::filesystem::path runtime_dir,
                                                   runtime::ImportLimits image_limits = {});

}  // namespace maf_sandbox::emulator
