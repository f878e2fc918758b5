#include "oci_peers.hpp"

#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "maf_sandbox/core/errors.hpp"
#include "measure.hpp"

namespace maf_sandbox::bench {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

// The environment every peer runs with: no state of the caller's leaks into the comparison.
char** peer_env() {
    static char path[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    static char* env[] = {path, nullptr};
    return env;
}

bool succeeds(const std::vector<std::string>& argv) {
    try {
        return spawn_and_wait(argv, peer_env()).status == 0;
    } catch (const std::exception&) {
        return false;
    }
}

// Runs `argv` once as a probe: "" when it succeeds, else the first line it printed on stderr (or
// its exit status), for the note that says why the peer is skipped.
std::string probe(const std::vector<std::string>& argv, const fs::path& scratch) {
    const auto errors = (scratch / "probe.stderr").string();
    int status = -1;
    try {
        status = spawn_and_wait(argv, peer_env(), false, errors.c_str()).status;
    } catch (const std::exception& e) {
        return e.what();
    }
    if (status == 0) {
        return {};
    }
    std::ifstream in(errors);
    std::string line;
    std::getline(in, line);
    if (line.size() > 200) {
        line.resize(200);
    }
    return line.empty() ? fmt::format("it exited {}", status) : line;
}

double timed(const std::vector<std::string>& argv, const std::string& what) {
    const auto start = Clock::now();
    const auto result = spawn_and_wait(argv, peer_env());
    const double ms = ms_since(start);
    if (result.status != 0) {
        throw Error(fmt::format("{} exited {} during the benchmark", what, result.status));
    }
    return ms;
}

std::string make_temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "maf-bench-peers-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
        throw SystemError(errno, "creating the peers' bundle directory");
    }
    return pattern;
}

// `<runtime> spec` writes the runtime's own default config into `bundle`; the process becomes
// `args`, without a terminal, and the root the shared read-only busybox tree.
bool write_bundle(const std::string& program, const fs::path& bundle, const fs::path& rootfs,
                  const std::vector<std::string>& args) {
    fs::create_directories(bundle);
    if (!succeeds({program, "spec", "--bundle", bundle.string()})) {
        return false;
    }
    std::ifstream in(bundle / "config.json");
    std::stringstream text;
    text << in.rdbuf();
    json::error_code ec;
    json::value config = json::parse(text.str(), ec);
    if (ec || !config.is_object()) {
        return false;
    }
    auto* process = config.as_object().if_contains("process");
    if (process == nullptr || !process->is_object()) {
        return false;
    }
    json::array argv;
    for (const auto& arg : args) {
        argv.emplace_back(arg);
    }
    process->as_object()["terminal"] = false;
    process->as_object()["args"] = std::move(argv);
    config.as_object()["root"] = json::object{{"path", rootfs.string()}, {"readonly", true}};
    std::ofstream out(bundle / "config.json", std::ios::trunc);
    out << json::serialize(config);
    return static_cast<bool>(out.flush());
}

}  // namespace

std::optional<OciWorkspace> OciWorkspace::create(std::string& why) {
    const auto busybox = find_program("busybox");
    if (!busybox) {
        why = "no busybox to build the peers' root from (apt install busybox-static)";
        return std::nullopt;
    }
    OciWorkspace workspace(make_temp_dir());
    const auto bin = workspace.rootfs() / "bin";
    fs::create_directories(bin);
    fs::copy_file(*busybox, bin / "busybox");
    for (const char* applet : {"true", "sleep", "sh"}) {
        fs::create_symlink("busybox", bin / applet);
    }
    return workspace;
}

OciWorkspace::OciWorkspace(OciWorkspace&& other) noexcept : dir_(std::move(other.dir_)) {
    other.dir_.clear();
}

OciWorkspace::~OciWorkspace() {
    if (!dir_.empty()) {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
}

std::optional<OciRuntimePeer> OciRuntimePeer::create(const std::string& name,
                                                     const OciWorkspace& workspace,
                                                     std::string& why) {
    const auto program = find_program(name);
    if (!program) {
        why = fmt::format("{} is not installed (apt install {})", name, name);
        return std::nullopt;
    }
    OciRuntimePeer peer(name, *program, workspace.dir() / name);
    if (!write_bundle(*program, peer.dir_ / "true", workspace.rootfs(), {"/bin/true"}) ||
        !write_bundle(*program, peer.dir_ / "resident", workspace.rootfs(),
                      {"/bin/sleep", "3600"})) {
        why = fmt::format("`{} spec` did not give a usable default config", name);
        return std::nullopt;
    }
    if (const auto failure = probe(
            peer.command({"run", "--bundle", (peer.dir_ / "true").string(), "probe"}), peer.dir_);
        !failure.empty()) {
        why = fmt::format("a first `{} run` failed on this host: {}", name, failure);
        return std::nullopt;
    }
    return peer;
}

OciRuntimePeer::OciRuntimePeer(OciRuntimePeer&& other) noexcept
    : name_(std::move(other.name_)),
      program_(std::move(other.program_)),
      dir_(std::move(other.dir_)),
      next_id_(other.next_id_),
      resident_(other.resident_),
      resident_failed_(other.resident_failed_) {
    other.resident_ = false;
}

OciRuntimePeer::~OciRuntimePeer() {
    if (resident_) {
        succeeds(command({"delete", "--force", "resident"}));
    }
}

std::vector<std::string> OciRuntimePeer::command(std::vector<std::string> tail) const {
    std::vector<std::string> argv = {program_, "--root", (dir_ / "state").string()};
    argv.insert(argv.end(), tail.begin(), tail.end());
    return argv;
}

double OciRuntimePeer::sample_run() {
    // A new name per sample: `run` without `-d` deletes its container when the process ends.
    const auto id = fmt::format("c{}", next_id_++);
    return timed(command({"run", "--bundle", (dir_ / "true").string(), id}),
                 fmt::format("`{} run`", name_));
}

bool OciRuntimePeer::start_resident(std::string& why) {
    resident_ = succeeds(
        command({"run", "--detach", "--bundle", (dir_ / "resident").string(), "resident"}));
    if (!resident_) {
        resident_failed_ = true;
        why = fmt::format("`{} run --detach` failed here, so `{} exec` is skipped", name_, name_);
    }
    return resident_;
}

std::optional<double> OciRuntimePeer::sample_exec(std::string& why) {
    if (resident_failed_ || (!resident_ && !start_resident(why))) {
        return std::nullopt;
    }
    return timed(command({"exec", "resident", "/bin/true"}), fmt::format("`{} exec`", name_));
}

std::optional<PodmanPeer> PodmanPeer::create(const OciWorkspace& workspace, std::string& why) {
    const auto program = find_program("podman");
    if (!program) {
        why = "podman is not installed (apt install podman)";
        return std::nullopt;
    }
    PodmanPeer peer(*program, workspace.dir() / "podman");
    const auto archive = workspace.dir() / "rootfs.tar";
    if (!succeeds({"/bin/tar", "-C", workspace.rootfs().string(), "-cf", archive.string(), "."}) ||
        !succeeds(peer.command({"import", "--quiet", archive.string(), "maf-bench-busybox"}))) {
        why = "podman could not import the busybox root into its own storage";
        return std::nullopt;
    }
    if (const auto failure = probe(
            peer.command({"run", "--rm", "--network", "none", "maf-bench-busybox", "/bin/true"}),
            workspace.dir());
        !failure.empty()) {
        why = fmt::format("a first `podman run` failed on this host: {}", failure);
        return std::nullopt;
    }
    return peer;
}

PodmanPeer::PodmanPeer(PodmanPeer&& other) noexcept
    : program_(std::move(other.program_)), dir_(std::move(other.dir_)) {
    other.dir_.clear();
}

PodmanPeer::~PodmanPeer() {
    if (!dir_.empty()) {
        // Its storage holds files only podman knows how to remove (layers, locks).
        succeeds(command({"system", "reset", "--force"}));
    }
}

std::vector<std::string> PodmanPeer::command(std::vector<std::string> tail) const {
    // Its own storage, with the drivers that work anywhere, and no daemon or journal to talk to.
    std::vector<std::string> argv = {program_,
                                     "--root",
                                     (dir_ / "root").string(),
                                     "--runroot",
                                     (dir_ / "run").string(),
                                     "--cgroup-manager",
                                     "cgroupfs",
                                     "--events-backend",
                                     "none",
                                     "--storage-driver",
                                     "vfs"};
    argv.insert(argv.end(), tail.begin(), tail.end());
    return argv;
}

double PodmanPeer::sample_run() {
    return timed(command({"run", "--rm", "--network", "none", "maf-bench-busybox", "/bin/true"}),
                 "`podman run`");
}

}  // namespace maf_sandbox::bench
