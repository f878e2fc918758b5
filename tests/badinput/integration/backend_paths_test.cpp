// Invalid UTF-8, NUL and traversal in every path-taking call of the Sandbox API, against the real
// backends: LocalBackend (namespaces, openat2) and AcasBackend against a TLS acas-emulator. Each
// call is refused with InvalidArgument before it touches anything, a host file outside the sandbox
// is never read, written or removed, and the guest's working directory gains nothing.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <fstream>

#include "emulator_process.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "path_battery.hpp"

namespace maf_sandbox::badinput {
namespace {

SandboxSpec shell_spec() {
    SandboxSpecFields fields;
    fields.kind = "badinput";
    fields.image = "host";
    fields.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out,
                                    Capability::files_list};
    return SandboxSpec(fields);
}

std::string read_all(const std::filesystem::path& path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A host directory no guest can see, with one file in it; checks afterwards that it is untouched.
class HostSentinel {
  public:
    explicit HostSentinel(const std::filesystem::path& dir) : dir_(dir) {
        std::filesystem::create_directories(dir_);
        std::ofstream(dir_ / "sentinel") << "host secret";
    }
    void expect_untouched() const {
        EXPECT_EQ(read_all(dir_ / "sentinel"), "host secret");
        std::size_t entries = 0;
        for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir_)) {
            ++entries;
        }
        EXPECT_EQ(entries, 1u) << "something was created next to the host sentinel";
    }
    std::string dir() const { return dir_.string(); }

  private:
    std::filesystem::path dir_;
};

// Walks the guest's /proc from the root working directory: every one passes through a link.
std::vector<BadPath> proc_walks(const std::string& host_dir) {
    return {
        {"proc self root walk from the root", "/proc/self/root" + host_dir + "/sentinel", "/",
         true},
        {"proc 1 root walk from the root", "proc/1/root" + host_dir + "/sentinel", "/", true},
        {"proc self cwd from the root", "/proc/self/cwd/sentinel", "/", true},
    };
}

// Disposes the key's sandbox when the test ends, however it ends (an assertion, an exception).
class DisposeAtExit {
  public:
    DisposeAtExit(boost::asio::io_context& io, SandboxBackend& backend, SandboxKey key)
        : io_(io), backend_(backend), key_(std::move(key)) {}
    ~DisposeAtExit() {
        try {
            const auto failure = drive(io_, backend_.dispose(key_, std::nullopt));
            EXPECT_FALSE(failure) << "the sandbox was not disposed";
        } catch (const std::exception& e) {
            ADD_FAILURE() << "disposing the sandbox failed: " << e.what();
        }
    }
    DisposeAtExit(const DisposeAtExit&) = delete;
    DisposeAtExit& operator=(const DisposeAtExit&) = delete;

  private:
    boost::asio::io_context& io_;
    SandboxBackend& backend_;
    SandboxKey key_;
};

void run_battery(boost::asio::io_context& io, Sandbox& sandbox, const HostSentinel& host) {
    const auto before = drive(io, sandbox.list_dir("", ""));
    auto cases = bad_paths(host.dir());
    const auto walks = proc_walks(host.dir());
    cases.insert(cases.end(), walks.begin(), walks.end());
    expect_every_path_call_refuses(io, sandbox, cases);
    expect_exec_refuses_bad_working_directories(io, sandbox);
    EXPECT_EQ(drive(io, sandbox.list_dir("", "")), before)
        << "a refused call left something in the working directory";
    host.expect_untouched();
}

TEST(LocalBackendBadPaths, EveryPathTakingCallRefusesAndNothingOutsideIsTouched) {
    TempDir dir;
    HostSentinel host(dir.path() / "host-only");
    local::LocalBackendConfig config;
    config.state_dir = dir.path() / "state";
    config.memory_bytes = 256ull << 20;
    local::LocalBackend backend(config);
    boost::asio::io_context io;
    const SandboxKey key{"badinput", "local", "agent", ""};
    DisposeAtExit dispose(io, backend, key);
    auto sandbox = drive(io, backend.acquire(key, shell_spec()));
    run_battery(io, *sandbox, host);
}

TEST(AcasBackendBadPaths, EveryPathTakingCallRefusesAndNothingOutsideIsTouched) {
    TempDir dir;
    HostSentinel host(dir.path() / "host-only");
    EmulatorProcess emulator(dir.path() / "state", /*tls=*/true);
    acas::AcasSandboxConfig config;
    config.endpoint = emulator.base_url();
    config.subscription_id = "sub";
    config.resource_group = "rg";
    config.sandbox_group = "badinput";
    config.ca_file = emulator.ca_file().string();
    config.token = "badinput-token";
    config.emulator = true;
    config.poll_interval = Seconds{0.1};
    config.silence_preview_warning = true;
    acas::AcasBackend backend(config);
    boost::asio::io_context io;
    const SandboxKey key{"badinput", "acas", "agent", ""};
    {
        DisposeAtExit dispose(io, backend, key);
        auto sandbox = drive(io, backend.acquire(key, shell_spec()));
        run_battery(io, *sandbox, host);
    }
    drive(io, backend.close());
}

}  // namespace
}  // namespace maf_sandbox::badinput
