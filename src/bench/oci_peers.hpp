// The container runtimes a user might pick instead of maf-sandbox, as `maf-sandbox bench` peers:
// runc and crun on an OCI bundle the bench builds from a static busybox, and podman on an image
// imported from the same root. Each peer is optional: one that is not installed, or that cannot
// run on this host's cgroup layout, is skipped with a note saying why, never faked.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace maf_sandbox::bench {

// A temporary directory with a read-only busybox root (`rootfs/`) and, per runtime, a bundle
// whose config is that runtime's own default (`<runtime> spec`) with the process changed. Removed,
// with every container the peers started in it, when it goes.
class OciWorkspace {
  public:
    // nullopt, with `why` set, when there is no static busybox to build the root from.
    static std::optional<OciWorkspace> create(std::string& why);
    ~OciWorkspace();
    OciWorkspace(OciWorkspace&& other) noexcept;
    OciWorkspace& operator=(OciWorkspace&&) = delete;
    OciWorkspace(const OciWorkspace&) = delete;
    OciWorkspace& operator=(const OciWorkspace&) = delete;

    const std::filesystem::path& dir() const { return dir_; }
    std::filesystem::path rootfs() const { return dir_ / "rootfs"; }

  private:
    explicit OciWorkspace(std::filesystem::path dir) : dir_(std::move(dir)) {}
    std::filesystem::path dir_;
};

// One OCI runtime (runc or crun) driven the way a user drives it: `run` of a fresh container per
// sample, and `exec` into one long-lived container.
class OciRuntimePeer {
  public:
    // nullopt, with `why` set, when the runtime is absent or a first `run` fails here.
    static std::optional<OciRuntimePeer> create(const std::string& name,
                                                const OciWorkspace& workspace, std::string& why);
    ~OciRuntimePeer();
    OciRuntimePeer(OciRuntimePeer&& other) noexcept;
    OciRuntimePeer& operator=(OciRuntimePeer&&) = delete;
    OciRuntimePeer(const OciRuntimePeer&) = delete;
    OciRuntimePeer& operator=(const OciRuntimePeer&) = delete;

    const std::string& name() const { return name_; }
    // Milliseconds for `<runtime> run` of /bin/true in a new container, whole process.
    double sample_run();
    // Milliseconds for `<runtime> exec` of /bin/true in the long-lived container, whole process;
    // nullopt when that container could not be started (the note says so once).
    std::optional<double> sample_exec(std::string& why);

  private:
    OciRuntimePeer(std::string name, std::string program, std::filesystem::path dir)
        : name_(std::move(name)), program_(std::move(program)), dir_(std::move(dir)) {}
    std::vector<std::string> command(std::vector<std::string> tail) const;
    bool start_resident(std::string& why);

    std::string name_, program_;
    std::filesystem::path dir_;  // the runtime's bundles and its --root state
    int next_id_ = 0;
    bool resident_ = false, resident_failed_ = false;
};

// podman running the same root as an imported image, in a storage of its own.
class PodmanPeer {
  public:
    static std::optional<PodmanPeer> create(const OciWorkspace& workspace, std::string& why);
    ~PodmanPeer();
    PodmanPeer(PodmanPeer&& other) noexcept;
    PodmanPeer& operator=(PodmanPeer&&) = delete;
    PodmanPeer(const PodmanPeer&) = delete;
    PodmanPeer& operator=(const PodmanPeer&) = delete;

    // Milliseconds for `podman run --rm` of /bin/true, whole process.
    double sample_run();

  private:
    PodmanPeer(std::string program, std::filesystem::path dir)
        : program_(std::move(program)), dir_(std::move(dir)) {}
    std::vector<std::string> command(std::vector<std::string> tail) const;

    std::string program_;
    std::filesystem::path dir_;
};

}  // namespace maf_sandbox::bench
