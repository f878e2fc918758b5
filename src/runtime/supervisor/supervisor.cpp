// The supervisor's host-side half: as host root, it builds the sandbox's root file system, binds
// the exec socket, starts the owner watch and the network services, clones PID 1 (pid1.cpp) into
// the new namespaces, writes its id maps and exits.
#include "supervisor.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "../kernel/loopback_namespace.hpp"
#include "exec_server.hpp"
#include "guest_network.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/kernel/mounts.hpp"
#include "maf_sandbox/runtime/kernel/namespaces.hpp"
#include "maf_sandbox/runtime/kernel/rootless.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "owner_watch.hpp"
#include "pid1.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

// Waits for the launcher's CgroupPlacement on kCgroupFd, joins it (this process has one thread:
// the join file moves only the writer) and records it in the config.
void join_placed_cgroups(SupervisorConfig& config) {
    std::string line;
    char chunk[512];
    while (line.find('\n') == std::string::npos) {
        const ssize_t n = ::read(kCgroupFd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            throw SystemError(n == 0 ? EPIPE : errno,
                              "receiving the sandbox's cgroups from the launcher (it gave up)");
        }
        line.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(kCgroupFd);
    auto placement = cgroup_placement_from_line(std::string_view(line).substr(0, line.find('\n')));
    config.cgroup_layout = placement.layout;
    config.delegated_cgroups = std::move(placement.delegated);
    config.oom_kill_count_file = std::move(placement.oom_kill_count_file);
    for (const auto& file : placement.join_files) {
        UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
        if (!fd || ::write(fd.get(), "0", 1) != 1) {
            throw SystemError(errno, fmt::format("joining the sandbox's cgroup {}", file.string()));
        }
    }
}

// The config: from kConfigFd (how the runtime passes it, so no host path is on PID 1's command
// line), or from a file named by hand.
std::string read_config(const char* path) {
    if (path != nullptr) {
        std::ifstream in(path);
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    }
    std::string text;
    char chunk[4096];
    for (;;) {
        const ssize_t n = ::read(kConfigFd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            throw SystemError(errno, "reading the supervisor's config from its descriptor");
        }
        if (n == 0) {
            break;
        }
        text.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(kConfigFd);  // PID 1 and the guest must not inherit it
    return text;
}

UniqueFd listen_on(const fs::path& socket_path) {
    ::unlink(socket_path.c_str());
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const auto path = socket_path.string();
    if (path.size() >= sizeof address.sun_path) {
        throw InvalidArgument(
            fmt::format("the socket path {} is longer than {} bytes; use a shorter state directory",
                        path, sizeof address.sun_path - 1));
    }
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    if (!fd || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::chmod(path.c_str(), 0600) != 0 || ::listen(fd.get(), 128) != 0) {
        throw SystemError(errno, fmt::format("listening on {}", path));
    }
    return fd;
}

}  // namespace

int supervisor_main(int argc, char** argv) {
    if (argc > 2) {
        std::fprintf(stderr,
                     "usage: maf-sandbox-supervisor [CONFIG.json] (started by the runtime, which "
                     "passes the config on fd %d)\n",
                     kConfigFd);
        return 2;
    }
    // The claim's lock goes to PID 1 with the clone, never to a program it or we execute.
    ::fcntl(kIdClaimFd, F_SETFD, FD_CLOEXEC);
    try {
        SupervisorConfig config =
            supervisor_config_from_json(json::parse(read_config(argc == 2 ? argv[1] : nullptr)));
        // Rootless: before anything that needs privilege, and before the helpers forked below, so
        // they are in it too. PID 1 is then cloned into this namespace rather than a new one.
        if (config.rootless) {
            enter_rootless_user_namespace(*config.rootless);
        }
        // First, while this process is in none of the sandbox's namespaces or cgroups: PID 1
        // inherits the life pipe's write end through the clone below.
        const UniqueFd owner_watch = start_owner_watch(config);
        // Closed egress: the network namespace is made beside the mounts (loopback_namespace.hpp).
        std::optional<PendingLoopbackNamespace> loopback;
        if (config.egress.mode == Egress::closed) {
            loopback.emplace(PendingLoopbackNamespace::start());
        }
        // The egress proxy, forked below, must be inside the sandbox's cgroups (limits, kill).
        const bool joins_first = config.egress.mode != Egress::closed;
        if (joins_first) {
            join_placed_cgroups(config);
        }
        // First, while this process is still in the host's mount namespace: the egress proxy
        // forked here never sees the sandbox's mounts.
        GuestNetwork network = GuestNetwork::prepare(config);
        // The root is opened here, as root: PID 1 enters it through this descriptor (as its
        // working directory across the clone below), never by the host path.
        const fs::path root = prepare_root(config.mounts, config.sandbox_dir);
        const UniqueFd root_dir{
            ::open(root.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
        if (!root_dir) {
            throw SystemError(errno, "opening the sandbox's root");
        }
        UniqueFd listener = listen_on(config.socket_path);
        if (!joins_first) {
            join_placed_cgroups(config);
        }
        const ExecCgroupParent cgroups = ExecCgroupParent::open(
            config.cgroup_layout, config.delegated_cgroups, config.oom_kill_count_file);
        const std::vector<sock_filter>& seccomp = config.seccomp;
        int go[2];
        if (::pipe2(go, O_CLOEXEC) != 0) {
            throw SystemError(errno, "creating the start pipe");
        }
        unsigned long namespaces = sandbox_namespace_flags();
        if (loopback) {
            // PID 1 inherits it from us instead of a network namespace of its own.
            const UniqueFd ns = loopback->take();
            if (::setns(ns.get(), CLONE_NEWNET) != 0) {
                throw SystemError(errno, "entering the sandbox's network namespace");
            }
            namespaces &= ~static_cast<unsigned long>(CLONE_NEWNET);
        }
        pid_t child = 0;
        {
            // The kernel copies the namespace's whole-sandbox signal and message queue budgets
            // from its creator's limits at creation; PID 1 inherits all three.
            const ScopedCreationLimits limits(config.budgets);
            if (::fchdir(root_dir.get()) != 0) {
                throw SystemError(errno, "entering the sandbox's root");
            }
            // Owned by the guest root's host uid, so the sandbox's per-user kernel counts are
            // charged to its own identity, not to host root.
            child =
                config.rootless
                    ? clone_with_namespaces(namespaces & ~static_cast<unsigned long>(CLONE_NEWUSER))
                    : clone_with_owned_namespaces(namespaces, config.ids.to_host(0),
                                                  config.ids.to_host(0));
            if (child == 0) {
                ::close(go[1]);
                ::close(root_dir.get());  // the working directory is all PID 1 needs of it
                sandbox_init(config, listener.get(), cgroups, seccomp, network, go[0]);
            }
            // Out of the sandbox's root: slirp4netns, started below, inherits our directory.
            if (::chdir("/") != 0) {
                throw SystemError(errno, "leaving the sandbox's root");
            }
        }
        ::close(go[0]);
        UniqueFd start(go[1]);
        if (!config.rootless) {
            write_id_maps(child, config.ids);
        }
        network.start_outside(config, child);
        report_to_host(fmt::format("pid {}", child));
        if (::write(start.get(), "g", 1) != 1) {
            throw SystemError(errno, "starting the sandbox's PID 1");
        }
        return 0;
    } catch (const SandboxEgressNotEnforced& e) {
        // Named, so launch_sandbox raises the same refusal rather than a generic failure.
        report_to_host(fmt::format("error: {}: {}", e.type_name(), e.what()));
        return 1;
    } catch (const InvalidArgument& e) {
        report_to_host(fmt::format("error: {}: {}", e.type_name(), e.what()));
        return 1;
    } catch (const std::exception& e) {
        report_to_host(fmt::format("error: {}", e.what()));
        return 1;
    }
}

}  // namespace maf_sandbox::runtime
