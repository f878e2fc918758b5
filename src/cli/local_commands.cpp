// `maf-sandbox run | exec | ls | rm | purge | gc`: the local runtime from the command line.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <boost/json.hpp>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "cli.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/runtime/gc.hpp"
#include "maf_sandbox/runtime/registry.hpp"

namespace maf_sandbox::cli {

namespace {

struct LocalOptions {
    std::string backend = "local";
    std::string floor = "microvm";
    std::string image = "host";
    std::uint64_t max_output = 1 << 20;
    std::optional<std::uint64_t> disk, memory, pids;
    double timeout = 60.0;
    std::vector<std::string> inputs, outputs;
    std::string out_dir = ".";
    std::string scope, thread, agent = "cli", kind = "shell";
    std::vector<std::string> command;
    std::vector<std::string> labels;
    bool json = false;
    std::vector<std::string> ids;
};

void require_local(const LocalOptions& options) {
    if (options.backend != "local") {
        throw InvalidArgument(
            fmt::format("this command manages local sandboxes only; --backend {} is not supported "
                        "here (use --backend local)",
                        options.backend));
    }
}

// Every command that acquires goes through the router, whose default floor is microvm: the local
// backend is a container backend, so the user consents with --floor container (or lower).
SandboxRouter local_router(std::shared_ptr<local::LocalBackend> backend,
                           const LocalOptions& options, const Context& context) {
    SandboxRouterOptions router_options;
    router_options.min_isolation = parse_isolation(options.floor);
    router_options.log = context.log;
    if (!meets_floor(backend->isolation(), router_options.min_isolation)) {
        throw SandboxBackendNotPermitted(fmt::format(
            "--backend local provides isolation 'container', below the floor '{}' (the router's "
            "default is microvm); to consent to container isolation pass --floor container",
            options.floor));
    }
    return SandboxRouter({std::move(backend)}, router_options);
}

local::LocalBackendConfig config_from(const LocalOptions& options) {
    local::LocalBackendConfig config;
    if (options.memory) {
        config.memory_bytes = *options.memory;
    }
    if (options.pids) {
        config.pids = *options.pids;
    }
    if (options.disk) {
        config.disk_bytes = *options.disk;
    }
    config.default_max_output_bytes = options.max_output;
    return config;
}

void add_limit_flags(CLI::App& command, LocalOptions& options) {
    command.add_option("--backend", options.backend, "local (default)");
    command.add_option("--floor", options.floor,
                       "Isolation floor; local needs --floor container or lower");
    command.add_option("--image", options.image, "Guest image (default host)");
    command
        .add_option("--max-output", options.max_output,
                    "Per-stream output cap in bytes (default 1 MiB)")
        ->check(CLI::PositiveNumber);
    command.add_option("--disk", options.disk, "Writable layer size in bytes")
        ->check(CLI::PositiveNumber);
    command.add_option("--memory", options.memory, "Memory limit in bytes")
        ->check(CLI::PositiveNumber);
    command.add_option("--pids", options.pids, "Process limit")->check(CLI::PositiveNumber);
    command.add_option("--timeout", options.timeout, "Seconds before the command's tree is killed")
        ->check(CLI::PositiveNumber);
    command.add_option("command", options.command, "Command and arguments (after --)")->required();
}

// Runs the command and prints its streams; returns its exit code.
int run_in(Sandbox& sandbox, const LocalOptions& options) {
    ExecRequest request;
    request.command = options.command;
    request.timeout = Seconds(options.timeout);
    request.max_output_bytes = options.max_output;
    try {
        const auto result = run_blocking(sandbox.exec(request));
        std::cout << result.stdout_bytes << std::flush;
        std::cerr << result.stderr_bytes << std::flush;
        return result.exit_code;
    } catch (const ExecOutputLimitExceeded& e) {
        std::cout << e.stdout_head() << std::flush;
        std::cerr << e.stderr_head();
        const auto dropped = e.total_bytes() - e.stdout_head().size() - e.stderr_head().size();
        std::cerr << fmt::format("\n[maf-sandbox: output over the {}-byte cap; {} bytes dropped]\n",
                                 options.max_output, dropped);
        return e.exit_code() >= 0 ? e.exit_code() : kExitRefused;
    }
}

std::string random_thread() {
    std::random_device device;
    return fmt::format("run-{:08x}{:08x}", device(), device());
}

std::string read_host_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw InvalidArgument(fmt::format("cannot read the input file {}; check the path", path));
    }
    std::stringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
}

}  // namespace

void add_local_commands(CLI::App& app, Context& context) {
    // run: one shot.
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command = app.add_subcommand(
            "run", "Run one command in a fresh local sandbox, then dispose of it");
        add_limit_flags(*command, *options);
        command->add_option("--in", options->inputs,
                            "HOSTFILE[:GUESTPATH] copied in before the command");
        command->add_option("--out", options->outputs, "GUESTPATH copied out after the command");
        command->add_option("--out-dir", options->out_dir, "Where --out files land (default .)");
        command->callback([options, &context] {
            require_local(*options);
            for (const auto& arg : options->command) {
                if (arg.find('\0') != std::string::npos) {
                    throw InvalidArgument("the command contains a NUL byte");
                }
            }
            auto router = local_router(std::make_shared<local::LocalBackend>(config_from(*options)),
                                       *options, context);
            SandboxSpecFields fields;
            fields.kind = "run";
            fields.image = options->image;
            fields.isolation_scope = IsolationScope::call;
            fields.requires_capabilities = {Capability::exec, Capability::files_in};
            if (!options->outputs.empty()) {
                fields.requires_capabilities.insert(Capability::files_out);
            }
            const SandboxKey key{"cli", random_thread(), options->agent, "run"};
            auto sandbox = run_blocking(router.acquire(key, SandboxSpec(fields)));
            struct Dispose {
                SandboxRouter& router;
                const SandboxKey& key;
                ~Dispose() { run_blocking(router.dispose_scope(key.scope, key.thread_id)); }
            } dispose{router, key};
            for (const auto& input : options->inputs) {
                const auto colon = input.find(':');
                const std::string host = input.substr(0, colon);
                const std::string guest = colon == std::string::npos
                                              ? std::filesystem::path(host).filename().string()
                                              : input.substr(colon + 1);
                run_blocking(sandbox->write_file(guest, read_host_file(host), ""));
            }
            context.exit_code = run_in(*sandbox, *options);
            for (const auto& output : options->outputs) {
                const auto bytes = run_blocking(sandbox->read_file(output, "", 1ull << 30));
                const auto target = std::filesystem::path(options->out_dir) /
                                    std::filesystem::path(output).filename();
                std::ofstream(target, std::ios::binary) << bytes;
            }
        });
    }
    // exec: warm reuse by key.
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command =
            app.add_subcommand("exec", "Run a command in the warm local sandbox of a key");
        add_limit_flags(*command, *options);
        command->add_option("--scope", options->scope, "Conversation scope")->required();
        command->add_option("--thread", options->thread, "Conversation thread")->required();
        command->add_option("--agent", options->agent, "Agent (default cli)");
        command->add_option("--kind", options->kind, "Sandbox kind (default shell)");
        command->callback([options, &context] {
            require_local(*options);
            auto router = local_router(std::make_shared<local::LocalBackend>(config_from(*options)),
                                       *options, context);
            SandboxSpecFields fields;
            fields.kind = options->kind;
            fields.image = options->image;
            auto sandbox = run_blocking(router.acquire(
                {options->scope, options->thread, options->agent, ""}, SandboxSpec(fields)));
            context.exit_code = run_in(*sandbox, *options);
        });
    }
    // ls
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command = app.add_subcommand("ls", "List local sandboxes");
        command->add_option("--backend", options->backend, "local (default)");
        command->add_option("--label", options->labels,
                            "k=v selector (repeatable, all must match)");
        command->add_flag("--json", options->json, "A JSON array of {id, labels, image, state}");
        command->callback([options] {
            require_local(*options);
            local::LocalBackend backend;
            const auto sandboxes = backend.list(options->labels);
            if (options->json) {
                boost::json::array out;
                for (const auto& info : sandboxes) {
                    boost::json::object labels;
                    for (const auto& [k, v] : info.labels) {
                        labels[k] = v;
                    }
                    out.emplace_back(boost::json::object{{"id", info.id},
                                                         {"labels", std::move(labels)},
                                                         {"image", info.image},
                                                         {"state", info.state}});
                }
                std::cout << boost::json::serialize(out) << "\n";
                return;
            }
            for (const auto& info : sandboxes) {
                std::string labels;
                for (const auto& [k, v] : info.labels) {
                    labels += fmt::format("{}{}={}", labels.empty() ? "" : ",", k, v);
                }
                std::cout << fmt::format("{}  {}  {}  {}\n", info.id, info.state, info.image,
                                         labels);
            }
        });
    }
    // rm
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command = app.add_subcommand("rm", "Remove local sandboxes by id");
        command->add_option("--backend", options->backend, "local (default)");
        command->add_option("ids", options->ids, "Sandbox ids")->required();
        command->callback([options, &context] {
            require_local(*options);
            local::LocalBackend backend;
            for (const auto& id : options->ids) {
                if (!backend.remove(id)) {
                    context.log->error("no sandbox {}", id);
                    context.exit_code = kExitRefused;
                }
            }
        });
    }
    // purge
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command = app.add_subcommand("purge", "Remove every local sandbox of a conversation");
        command->add_option("--backend", options->backend, "local (default)");
        command->add_option("--scope", options->scope, "Conversation scope")->required();
        command->add_option("--thread", options->thread, "Conversation thread")->required();
        command->callback([options] {
            require_local(*options);
            local::LocalBackend backend;
            std::cout << backend.purge(options->scope, options->thread) << "\n";
        });
    }
    // gc
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command =
            app.add_subcommand("gc", "Reclaim what crashed or expired local sandboxes left behind");
        command->add_option("--backend", options->backend, "local (default)");
        command->callback([options, &context] {
            require_local(*options);
            runtime::Registry registry(runtime::default_state_dir());
            const auto report = runtime::reconcile(registry);
            std::cout << fmt::format(
                "examined {}, alive {}, reclaimed {}, orphan dirs removed {}, failed {}\n",
                report.examined, report.alive, report.reclaimed, report.orphan_dirs_removed,
                report.failed);
            for (const auto& error : report.errors) {
                context.log->error("{}", error);
            }
            if (report.failed > 0) {
                context.exit_code = kExitRefused;
            }
        });
    }
}

}  // namespace maf_sandbox::cli
