// The backend tests' harness: the fake data plane, a config pointed at it (fast polls and
// retries), a spec whose storage base is a private temporary directory, and one io_context.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "fake_service.hpp"
#include "maf_sandbox/acas/backend.hpp"

namespace maf_sandbox::acas {

struct Harness {
    explicit Harness(std::optional<std::string> header = std::nullopt)
        : service(std::move(header)) {}

    AcasSandboxConfig config() {
        AcasSandboxConfig c;
        c.endpoint = service.endpoint();
        c.subscription_id = "sub";
        c.resource_group = "rg";
        c.sandbox_group = "grp";
        c.registry = "reg.example.io";
        c.ca_file = service.ca_file();
        c.token = "test-token";
        c.emulator = false;
        c.poll_interval = Seconds{0.02};
        c.read_timeout = Seconds{20};
        c.retry.initial_backoff = Seconds{0.01};
        c.retry.max_backoff = Seconds{0.05};
        c.silence_preview_warning = true;
        return c;
    }
    // 127.0.0.1 implies emulator mode, so the fake is "the real service" only when the config
    // says emulator = false explicitly and the endpoint is not loopback. Tests that need the real
    // service's microvm claim use this override.
    std::unique_ptr<AcasBackend> backend(std::function<void(AcasSandboxConfig&)> tweak = {}) {
        auto c = config();
        if (tweak)
            tweak(c);
        return std::make_unique<AcasBackend>(c);
    }
    SandboxSpec spec(std::function<void(SandboxSpecFields&)> tweak = {}) const {
        SandboxSpecFields f;
        f.kind = "shell";
        f.image = "host";
        f.work_dir = (work.path() / "work").string();
        f.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out,
                                   Capability::files_list};
        if (tweak)
            tweak(f);
        return SandboxSpec(f);
    }

    testing::FakeAcasService service;
    testing::TempDir work;
    boost::asio::io_context io;
};

inline const SandboxKey kKey{"scope-1", "thread-1", "agent-1", ""};

}  // namespace maf_sandbox::acas
