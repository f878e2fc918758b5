#include <fcntl.h>

#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <boost/json/value_to.hpp>
#include <cstdlib>

#include "engine.hpp"
#include "guest_path.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/host/recorded_handle.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/kernel/state_dir.hpp"
#include "state_store.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
namespace {

std::uint64_t to_u64(const json::object& o, const char* key) {
    if (auto* v = o.if_contains(key); v != nullptr && v->is_number()) {
        return v->to_number<std::uint64_t>();
    }
    return 0;
}

// Each sandbox's pids limit. Every live sandbox's limit together must fit the host's pid budget
// (a share of kernel.pid_max; a create past it fails with SandboxCapacityExceeded), and the
// limit also divides the sandbox's share of fs.file-max into its RLIMIT_NOFILE: 1024 leaves 240
// descriptors a process on a host with 2.4 million files. MAF_SANDBOX_EMULATOR_PIDS overrides.
constexpr std::uint64_t kDefaultSandboxPids = 1024;

std::uint64_t sandbox_pids() {
    if (const char* text = std::getenv("MAF_SANDBOX_EMULATOR_PIDS"); text && *text) {
        char* end = nullptr;
        const auto value = std::strtoull(text, &end, 10);
        if (end != text && *end == '\0' && value > 0) {
            return value;
        }
        throw InvalidArgument(
            fmt::format("MAF_SANDBOX_EMULATOR_PIDS='{}' is not a positive whole number", text));
    }
    return kDefaultSandboxPids;
}

runtime::SandboxHandle handle_of(const json::object& handle) {
    const auto* rt = handle.if_contains("runtime");
    if (rt == nullptr || !rt->is_object()) {
        throw Error("the sandbox has no runtime handle; delete it and create a new one");
    }
    return runtime::SandboxHandle::from_runtime_json(static_cast<pid_t>(to_u64(handle, "pid")),
                                                     to_u64(handle, "startTime"), rt->as_object());
}

class RuntimeEngine final : public SandboxEngine {
  public:
    RuntimeEngine(std::filesystem::path dir, runtime::ImportLimits image_limits)
        : dir_(std::move(dir)), images_(dir_), image_limits_(std::move(image_limits)) {
        (void)runtime::open_trusted_state_dir(dir_ / "sandboxes", 0700, kEmulatorStateAdvice);
    }

    Isolation isolation() const override { return Isolation::container; }

    bool has_image(const std::string& image) const override {
        if (image == runtime::kHostImage) {
            return true;
        }
        try {
            const auto ref = runtime::parse_image_ref(image);
            const auto all = images_.list();
            return std::any_of(all.begin(), all.end(),
                               [&](const runtime::ImageInfo& i) { return i.ref == ref; });
        } catch (const Error&) {
            return false;
        }
    }

    void import_image(const std::filesystem::path& archive, const std::string& image) override {
        images_.import(archive, image, image_limits_);
    }

    void remove_image(const std::string& image) override {
        try {
            images_.remove(image);
        } catch (const InvalidArgument&) {
            // already gone
        }
    }

    json::object launch(const LaunchRequest& request) override {
        const auto plan = images_.resolve(request.image);
        std::string hex;
        for (char c : request.id) {
            if (c != '-') {
                hex.push_back(c);
            }
        }
        runtime::SandboxLaunch launch;
        launch.id = hex;
        launch.sandbox_dir = dir_ / "sandboxes" / hex;
        std::filesystem::create_directories(launch.sandbox_dir);
        // A launch that fails (a bad image, a limit refused) leaves no directory behind: only an
        // empty one is removed (rmdir), so nothing a launch did write is touched by name.
        struct RemoveIfEmpty {
            const std::filesystem::path& dir;
            bool keep = false;
            ~RemoveIfEmpty() {
                if (!keep) {
                    ::rmdir(dir.c_str());
                }
            }
        } cleanup{launch.sandbox_dir};
        // The runtime's own directory is the guest root's (the host image ships it owned by an id
        // no sandbox maps), so the file plane, acting as the guest's root, can create beside it;
        // the ACAS backend's storage base is made there.
        launch.mounts = runtime::root_plan_for(plan, {kDefaultWorkDir});
        launch.mounts.layer_mount_point = dir_ / "mnt";  // shared, as the local backend's
        // The built-in image runs as root inside its user namespace, as the service's prebuilt
        // images do; an imported image keeps its configured USER.
        const bool builtin =
            request.image == runtime::kHostImage ||
            request.image == fmt::format("{}:{}", runtime::kHostImage, runtime::kDefaultTag);
        launch.guest_uid = builtin ? 0 : plan.uid;
        launch.guest_gid = builtin ? 0 : plan.gid;
        for (const auto& [k, v] : plan.env) {
            launch.env.emplace_back(k, v);
        }
        for (const auto& [k, v] : request.environment) {
            launch.env.emplace_back(k, v);
        }
        // The service's default exec directory is unknown; "/" always exists (docs/emulator.md).
        // Relative file-plane paths resolve against the same directory (guest_path.hpp).
        launch.default_cwd = kGuestWorkingDirectory;
        launch.hostname = "sandbox";
        launch.limits.pids = sandbox_pids();
        launch.limits.memory_bytes = request.memory_bytes;
        launch.limits.cpus = request.cpus;
        launch.egress = request.egress;
        launch.egress_operator = runtime::EgressOperatorOptions::from_environment();
        runtime::SandboxHandle handle;
        try {
            handle = runtime::launch_sandbox(launch);
        } catch (const SandboxCapabilityNotSupported&) {
            // A limit this machine cannot enforce: the emulator's resources are advisory. The
            // pids limit is not: the host's pid and file budgets are computed from it.
            launch.limits = {};
            launch.limits.pids = sandbox_pids();
            handle = runtime::launch_sandbox(launch);
        }
        cleanup.keep = true;
        return json::object{{"pid", handle.pid},
                            {"startTime", handle.start_time},
                            {"runtime", handle.runtime_json()},
                            {"rootUid", handle.ids.to_host(0)},
                            {"rootGid", handle.ids.to_host(0)}};
    }

    bool alive(const json::object& handle) const override {
        try {
            return runtime::sandbox_alive(own(handle));
        } catch (const Error&) {
            return false;
        }
    }

    void destroy(const json::object& handle) override { runtime::destroy_sandbox(own(handle)); }

    void freeze(const json::object& handle, bool frozen) override {
        const auto h = own(handle);
        runtime::SandboxCgroup::attach(h.cgroup_layout, h.cgroups)->freeze(frozen);
    }

    EngineExec exec(const json::object& handle, const std::string& command, const std::string& cwd,
                    std::chrono::milliseconds timeout, std::uint64_t max_output_bytes) override {
        runtime::ExecCall call;
        call.command = command;
        call.cwd = cwd;
        call.timeout = timeout;
        call.max_output_bytes = max_output_bytes;
        call.wait_for_output_eof = true;
        call.kill_past_output_cap = true;
        const auto reply = runtime::exec_in_sandbox(own(handle), call);
        // The runtime names a working directory its exec could not enter in this form
        // (exec_server.cpp); any other failure is the emulator's.
        if (reply.status == runtime::ExecStatus::failed &&
            reply.message.starts_with("the working directory ")) {
            throw UnusableWorkingDirectory(reply.message);
        }
        if (reply.status == runtime::ExecStatus::failed) {
            throw Error(fmt::format("the sandbox could not run the command: {}", reply.message));
        }
        EngineExec out;
        out.exit_code = reply.exit_code;
        out.timed_out = reply.status == runtime::ExecStatus::timed_out;
        out.stdout_head = reply.stdout_head;
        out.stderr_head = reply.stderr_head;
        out.stdout_total = reply.stdout_total;
        out.stderr_total = reply.stderr_total;
        return out;
    }

    GuestAuthority open_authority(const json::object& handle) override {
        const auto h = own(handle);
        const auto open_ns = [&](const char* name) {
            return runtime::UniqueFd(
                ::open(fmt::format("/proc/{}/ns/{}", h.pid, name).c_str(), O_RDONLY | O_CLOEXEC));
        };
        GuestAuthority authority{open_ns("user"), open_ns("mnt"), runtime::UniqueFd()};
        // open_sandbox_root checks, after its open, that the pid is still the sandbox's PID 1:
        // the namespaces opened before it are then that PID 1's too.
        authority.root = runtime::open_sandbox_root(h);
        if (!authority.user_ns || !authority.mount_ns) {
            throw SandboxOutputUnreachable(
                "the sandbox's namespaces could not be opened (it is ending); retry or create a "
                "new sandbox");
        }
        return authority;
    }

  private:
    // The handle in the emulator's state is untrusted input: used only when it names this
    // sandbox's own directory beneath dir_, its socket and its maf-sbx cgroups.
    runtime::SandboxHandle own(const json::object& handle) const {
        auto h = handle_of(handle);
        runtime::check_recorded_handle(h, dir_ / "sandboxes");
        return h;
    }

    std::filesystem::path dir_;
    runtime::ImageStore images_;
    runtime::ImportLimits image_limits_;
};

}  // namespace

std::unique_ptr<SandboxEngine> make_runtime_engine(std::filesystem::path runtime_dir,
                                                   runtime::ImportLimits image_limits) {
    return std::make_unique<RuntimeEngine>(std::move(runtime_dir), std::move(image_limits));
}

}  // namespace maf_sandbox::emulator
