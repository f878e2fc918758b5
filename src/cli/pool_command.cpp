// `maf-sandbox pool set|show|fill|drain`: the shared pool of pre-built local sandboxes. A one-shot
// `maf-sandbox run` whose flags match the pool takes one of them (relabelled for the run) instead
// of launching a sandbox, and leaves a detached `pool fill` behind to top the pool up again.
// Pooled sandboxes are ordinary registry records labelled maf-pool=<signature>: `ls` shows them,
// gc and their lifecycle policy (idle timeout, lifetime) reap them like any other.
#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends.hpp"
#include "cli.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/local/shared_pool.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "option_parsing.hpp"

namespace maf_sandbox::cli {

namespace {

struct PoolOptions {
    std::size_t size = 0;
    std::string image = "host";
    std::optional<std::uint64_t> memory, pids, disk;
};

local::LocalBackendConfig config_for(const local::SharedPoolSettings& settings) {
    return local_backend_config(settings.memory_bytes, settings.pids, settings.disk_bytes);
}

std::size_t ready_count(const local::LocalBackend& backend, const std::string& signature) {
    std::size_t ready = 0;
    for (const auto& info : backend.list({fmt::format("maf-pool={}", signature)})) {
        ready += info.state == "running" ? 1 : 0;
    }
    return ready;
}

}  // namespace

void add_pool_command(CLI::App& app, Context& context) {
    auto* pool = app.add_subcommand(
        "pool", "The shared pool of pre-built local sandboxes that one-shot `run` takes from");
    pool->require_subcommand(1);
    {
        auto options = std::make_shared<PoolOptions>();
        auto* command = pool->add_subcommand(
            "set", "Keep SIZE sandboxes ready for `run` with these flags (0 removes the pool)");
        command->add_option("--size", options->size, "How many to keep ready")->required();
        command->add_option("--image", options->image, "Guest image (default host)");
        command->add_option("--memory", options->memory, "Memory limit, as run's (e.g. 512M)")
            ->transform(byte_size());
        command->add_option("--pids", options->pids, "Process limit, as run's")
            ->transform(positive_count());
        command->add_option("--disk", options->disk, "Writable layer size, as run's (e.g. 2G)")
            ->transform(byte_size());
        command->callback([options] {
            local::SharedPoolSettings settings;
            settings.size = options->size;
            settings.image = options->image;
            settings.memory_bytes = options->memory;
            settings.pids = options->pids;
            settings.disk_bytes = options->disk;
            local::LocalBackend backend(config_for(settings));
            // New settings replace the old pool whole: sandboxes built for other flags would
            // never be taken.
            local::remove_shared_pool(backend.state_dir());
            backend.drain_shared_pool();
            if (settings.size == 0) {
                std::cout << "no pool\n";
                return;
            }
            settings.signature = backend.pool_signature(settings.image);
            backend.fill_shared_pool(settings.size, settings.image);
            local::write_shared_pool(backend.state_dir(), settings);
            std::cout << fmt::format("{} ready ({})\n", ready_count(backend, settings.signature),
                                     settings.image);
        });
    }
    {
        auto* command = pool->add_subcommand("show", "Print the pool's settings and readiness");
        command->callback([] {
            local::LocalBackend backend;
            const auto settings = local::read_shared_pool(backend.state_dir());
            if (!settings) {
                std::cout << "no pool\n";
                return;
            }
            std::cout << fmt::format("size {} image {} ready {}\n", settings->size, settings->image,
                                     ready_count(backend, settings->signature));
        });
    }
    {
        auto reap = std::make_shared<std::vector<std::string>>();
        auto* command = pool->add_subcommand(
            "fill", "Top the pool up to its size (what `run` starts after taking one)");
        command
            ->add_option("--reap", *reap,
                         "Remove this (used) sandbox first: the second half of a pooled run's "
                         "disposal")
            ->allow_extra_args(false);
        command->callback([reap, &context] {
            const auto state_dir = runtime::default_state_dir();
            if (!reap->empty()) {
                local::LocalBackend reaper;
                for (const auto& id : *reap) {
                    try {
                        reaper.remove(id);
                    } catch (const std::exception& e) {
                        context.log->error("{}", e.what());
                        context.exit_code = kExitFailed;
                    }
                }
            }
            const auto settings = local::read_shared_pool(state_dir);
            if (!settings) {
                return;
            }
            local::LocalBackend backend(config_for(*settings));
            if (backend.pool_signature(settings->image) != settings->signature) {
                context.log->error(
                    "the pool's settings were written by another version; set them again with "
                    "`maf-sandbox pool set`");
                context.exit_code = kExitFailed;
                return;
            }
            backend.fill_shared_pool(settings->size, settings->image);
        });
    }
    {
        auto* command = pool->add_subcommand("drain", "Remove the pool and its ready sandboxes");
        command->callback([] {
            local::LocalBackend backend;
            local::remove_shared_pool(backend.state_dir());
            std::cout << backend.drain_shared_pool() << "\n";
        });
    }
}

}  // namespace maf_sandbox::cli
