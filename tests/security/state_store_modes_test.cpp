// The state stores are root's alone. The registry's state directory, its `sandboxes` and `locks`,
// the layer mount point and the image store are 0700 and owned by root once sandboxes run, even
// where they existed looser. No host uid of a sandbox (its guest root's, its guest user's, its
// egress services') can list them or reach anything beneath them: not a sandbox's exec.sock, not
// an image's files. That holds because a supervisor, once it is the sandbox's own host uid, no
// longer resolves a host path: it enters its root through a descriptor opened as root.
// The benign control: sandboxes of the built-in image and of an imported one still start, exec
// and warm from the pool with the stores private.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "../runtimefs/tar_builder.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "security_fixture.hpp"

namespace maf_sandbox::security {
namespace {

using runtime::testing::TarBuilder;

constexpr const char* kImage = "private:1";

class StateStoreModes : public ::testing::Test {
  protected:
    StateStoreModes() {
        // Traversable, so that only the stores' own modes stand between a host uid and them.
        if (::chmod(work.path().c_str(), 0711) != 0) {
            throw std::runtime_error("chmod of the test's directory failed");
        }
        // Made looser than the runtime wants, as create_directories under the umask does.
        fs::create_directories(state / "images");
        fs::create_directories(state / "sandboxes");
        for (const auto& dir : {state, state / "images", state / "sandboxes"}) {
            ::chmod(dir.c_str(), 0755);
        }
        TarBuilder layer;
        layer.dir("etc")
            .file("etc/hostname", "private\n")
            .dir("maf-sandbox")
            .dir("maf-sandbox/work")
            .dir("tmp")
            .dir("proc")
            .dir("dev")
            .file("probe", slurp(MAF_SECURITY_PROBE), 0755);
        const auto tarball = work.path() / "rootfs.tar";
        spit(tarball, layer.finish());
        rootfs = runtime::ImageStore(state).import(tarball, kImage).rootfs;

        local::LocalBackendConfig config;
        config.state_dir = state;
        config.memory_bytes = 256ull << 20;
        config.pool_size = 1;
        backend = std::make_unique<local::LocalBackend>(config);
    }
    ~StateStoreModes() override {
        for (const auto& thread : threads) {
            try {
                run_blocking(backend->dispose_scope("stores", thread));
            } catch (...) {
            }
        }
    }

    std::shared_ptr<Sandbox> acquire(const std::string& thread, const std::string& image = "") {
        SandboxSpecFields fields;
        fields.kind = "security";
        if (!image.empty()) {
            fields.image = image;
        }
        threads.push_back(thread);
        return run_blocking(
            backend->acquire(SandboxKey{"stores", thread, "agent", ""}, SandboxSpec(fields)));
    }

    static ExecResult exec(Sandbox& sandbox, Command command) {
        ExecRequest request;
        request.command = std::move(command);
        request.timeout = kExecTimeout;
        return run_blocking(sandbox.exec(request));
    }

    // Every running sandbox's handle, from the registry.
    std::vector<runtime::SandboxHandle> handles() const {
        std::vector<runtime::SandboxHandle> out;
        for (const auto& record : runtime::Registry(state).list()) {
            out.push_back(runtime::SandboxHandle::from_runtime_json(
                record.supervisor.pid, record.supervisor.start_time, record.runtime));
        }
        return out;
    }

    TempDir work{"maf-sec-stores"};
    fs::path state = work.path() / "state";
    fs::path rootfs;
    std::unique_ptr<local::LocalBackend> backend;
    std::vector<std::string> threads;
};

TEST_F(StateStoreModes, ControlSandboxesStartExecAndWarmFromThePoolWithTheStoresPrivate) {
    const auto first = acquire("first");
    const auto hello = exec(*first, std::string("echo hello; id -u"));
    EXPECT_EQ(hello.exit_code, 0) << hello.stderr_bytes;
    EXPECT_EQ(hello.stdout_bytes, "hello\n1000\n");

    // The pool refills with a pre-built sandbox, which the next create takes and execs in.
    backend->wait_for_pool();
    std::string pooled;
    for (const auto& info : backend->list({})) {
        if (info.labels.count("maf-pool") > 0) {
            pooled = info.id;
        }
    }
    ASSERT_FALSE(pooled.empty()) << "the pool was not refilled";
    const auto second = acquire("second");
    const auto warm = exec(*second, std::string("echo warm"));
    EXPECT_EQ(warm.stdout_bytes, "warm\n") << warm.stderr_bytes;
    bool taken = false;
    for (const auto& info : backend->list({"thread=second"})) {
        taken = info.id == pooled;
    }
    EXPECT_TRUE(taken) << "the second create did not take the pooled sandbox";

    const auto imaged = acquire("imaged", kImage);
    const auto read = exec(*imaged, Argv{"/probe", "read", "/etc/hostname"});
    EXPECT_EQ(read.exit_code, 0) << read.stderr_bytes;
    EXPECT_EQ(read.stdout_bytes, "private\n");
}

// What a host process of `uid` (and the same gid, no groups, hence no capabilities) can do with
// each path: 0 when every attempt failed with EACCES, else the index of the first that did not.
int reach_as(uid_t uid, const std::vector<fs::path>& directories,
             const std::vector<fs::path>& beneath, const std::vector<fs::path>& sockets) {
    const pid_t child = ::fork();
    if (child == 0) {
        const gid_t gid = static_cast<gid_t>(uid);
        if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 ||
            ::setresuid(uid, uid, uid) != 0) {
            ::_exit(250);
        }
        int index = 1;
        for (const auto& dir : directories) {  // list
            if (::open(dir.c_str(), O_RDONLY | O_DIRECTORY) >= 0 || errno != EACCES) {
                ::_exit(index);
            }
            ++index;
        }
        for (const auto& path : beneath) {  // traverse
            struct stat st {};
            if (::stat(path.c_str(), &st) == 0 || errno != EACCES) {
                ::_exit(index);
            }
            ++index;
        }
        for (const auto& path : sockets) {  // connect
            const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
            sockaddr_un address{};
            address.sun_family = AF_UNIX;
            std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
            if (fd < 0 ||
                ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 ||
                errno != EACCES) {
                ::_exit(index);
            }
            ++index;
        }
        ::_exit(0);
    }
    int status = 0;
    if (::waitpid(child, &status, 0) != child || !WIFEXITED(status)) {
        return 255;
    }
    return WEXITSTATUS(status);
}

TEST_F(StateStoreModes, TheStoresAre0700RootsAndNoHostUidOfASandboxCanListOrTraverseThem) {
    const auto host = acquire("host");
    const auto imaged = acquire("imaged", kImage);
    ASSERT_EQ(exec(*host, std::string("true")).exit_code, 0);
    ASSERT_EQ(exec(*imaged, Argv{"/probe", "read", "/etc/hostname"}).exit_code, 0);

    const std::vector<fs::path> stores{state, state / "sandboxes", state / "locks", state / "mnt",
                                       state / "images"};
    for (const auto& dir : stores) {
        struct stat st {};
        ASSERT_EQ(::lstat(dir.c_str(), &st), 0) << dir;
        EXPECT_TRUE(S_ISDIR(st.st_mode)) << dir;
        EXPECT_EQ(st.st_mode & 07777, 0700u) << dir;
        EXPECT_EQ(st.st_uid, 0u) << dir;
        EXPECT_EQ(st.st_gid, 0u) << dir;
    }

    backend->wait_for_pool();  // the pooled sandbox's record is complete, and checked too
    const auto running = handles();
    ASSERT_GE(running.size(), 2u);
    std::vector<fs::path> beneath{rootfs / "etc" / "hostname", rootfs / "probe"};
    std::vector<fs::path> sockets;
    for (const auto& handle : running) {
        beneath.push_back(handle.sandbox_dir);
        beneath.push_back(handle.socket);
        sockets.push_back(handle.socket);
    }
    // Control: root reaches every one of them (they exist), and the sockets answer root.
    for (const auto& path : beneath) {
        EXPECT_TRUE(fs::exists(path)) << path;
    }
    for (const auto& handle : running) {
        const auto uids = {handle.ids.to_host(0), handle.guest_host_uid, handle.ids.proxy_id(),
                           handle.ids.slirp_id()};
        for (const uid_t uid : uids) {
            EXPECT_EQ(reach_as(uid, stores, beneath, sockets), 0)
                << "host uid " << uid << " of sandbox " << handle.sandbox_id
                << " (250: could not become it; N: the Nth store, path or socket was reachable)";
        }
    }
}

}  // namespace
}  // namespace maf_sandbox::security
