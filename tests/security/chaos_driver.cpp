// maf-security-chaos-driver STATE_DIR SEED: acquires, execs, writes and disposes local sandboxes
// in a loop until it is killed. The chaos test starts it inside a cgroup of its own (so every
// sandbox it creates lands beneath that cgroup), SIGKILLs it at random points, and then checks
// that gc leaves no kernel object behind.
#include <cstdio>
#include <random>
#include <string>

#include <fmt/format.h>

#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: maf-security-chaos-driver STATE_DIR SEED\n");
        return 2;
    }
    std::mt19937 random(static_cast<unsigned>(std::stoul(argv[2])));
    maf_sandbox::local::LocalBackendConfig config;
    config.state_dir = argv[1];
    config.memory_bytes = 256ull << 20;
    config.pids = 128;
    maf_sandbox::local::LocalBackend backend(config);
    maf_sandbox::SandboxSpecFields fields;
    fields.kind = "chaos";
    const maf_sandbox::SandboxSpec spec(fields);
    for (unsigned step = 0;; ++step) {
        const maf_sandbox::SandboxKey key{"chaos", fmt::format("t{}", random() % 3), "agent", ""};
        try {
            auto sandbox = maf_sandbox::run_blocking(backend.acquire(key, spec));
            std::printf("acquired %u\n", step);
            std::fflush(stdout);
            maf_sandbox::ExecRequest request;
            request.command = std::string("echo hi; (sleep 30 &) ; printf x > /tmp/x");
            request.timeout = std::chrono::seconds(10);
            maf_sandbox::run_blocking(sandbox->exec(request));
            maf_sandbox::run_blocking(
                sandbox->write_file(fmt::format("f{}", step), std::string(4096, 'c'), ""));
            switch (random() % 3) {
                case 0:
                    maf_sandbox::run_blocking(backend.dispose(key, std::nullopt));
                    break;
                case 1:
                    maf_sandbox::run_blocking(backend.dispose_scope(key.scope, key.thread_id));
                    break;
                default:
                    break;  // keep it warm for the next acquire
            }
        } catch (const std::exception& e) {
            std::fprintf(stderr, "step %u: %s\n", step, e.what());
        }
    }
}
