// `maf-sandbox run | exec | ls | rm | purge | gc`: sandboxes from the command line, on the local
// runtime (`--backend local`, the default) or on ACAS (`--backend acas`; gc is local only).
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <boost/json.hpp>
#include <iostream>

#include "backends.hpp"
#include "cli.hpp"
#include "exec_env.hpp"
#include "exec_report.hpp"
#include "exec_stream_report.hpp"
#include "interrupt.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/runtime/host/gc.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "option_parsing.hpp"
#include "run_transfers.hpp"
#include "terminal_exec.hpp"

namespace maf_sandbox::cli {

namespace {

constexpr const char* kLocal = "local";
constexpr const char* kAcas = "acas";
// The most `run` copies in or out per file, held in memory on the way.
constexpr std::uint64_t kMaxTransferBytes = 1ull << 30;

struct LocalOptions {
    std::string backend = kLocal;
    std::string floor = "microvm";
    std::string image;  // default: host (local), default_image_for() (acas)
    std::uint64_t max_output = 1 << 20;
    std::optional<std::uint64_t> disk, memory, pids;
    double timeout = 60.0;
    std::vector<std::string> inputs, outputs;
    std::string out_dir = ".";
    std::string scope, thread, agent = "cli", kind = "shell";
    std::string egress = "closed";
    std::vector<std::string> allow;
    std::vector<std::string> command;
    std::vector<std::string> env_pairs, env_files;   // -e, --env-file
    std::map<std::string, std::string> environment;  // what they give, read before any sandbox
    std::string id;                                  // exec --id
    TerminalOptions terminal;                        // -t, -i
    std::vector<std::string> labels;
    bool json = false;
    std::vector<std::string> ids;
    BackendOptions backend_options;
};

void require_known_backend(const LocalOptions& options) {
    if (options.backend != kLocal && options.backend != kAcas) {
        throw InvalidArgument(
            fmt::format("--backend {} is not supported here; use --backend local or --backend acas",
                        options.backend));
    }
}

void require_local(const LocalOptions& options) {
    if (options.backend != kLocal) {
        throw InvalidArgument(
            fmt::format("this command manages local sandboxes only; --backend {} is not supported "
                        "here (use --backend local)",
                        options.backend));
    }
}

// Every command that acquires goes through the router, whose default floor is microvm: the local
// backend is a container backend (and the acas-emulator names its own rung), so the user consents
// with --floor <rung> (or lower).
SandboxRouter router_for(std::shared_ptr<SandboxBackend> backend, const LocalOptions& options,
                         const Context& context) {
    SandboxRouterOptions router_options;
    router_options.min_isolation = parse_isolation(options.floor);
    router_options.log = context.log;
    if (!meets_floor(backend->isolation(), router_options.min_isolation)) {
        const auto rung = to_string(backend->isolation());
        throw SandboxBackendNotPermitted(fmt::format(
            "--backend {} provides isolation '{}', below the floor '{}' (the router's default is "
            "microvm); to consent to {} isolation pass --floor {}",
            options.backend, rung, options.floor, rung, rung));
    }
    return SandboxRouter({std::move(backend)}, router_options);
}

local::LocalBackendConfig config_from(const LocalOptions& options) {
    auto config = local_backend_config(options.memory, options.pids, options.disk);
    config.default_max_output_bytes = options.max_output;
    return config;
}

std::shared_ptr<SandboxBackend> open_backend(const LocalOptions& options) {
    require_known_backend(options);
    if (options.backend == kLocal) {
        return std::make_shared<local::LocalBackend>(config_from(options));
    }
    if (options.disk || options.memory || options.pids) {
        throw InvalidArgument(
            "--disk, --memory and --pids size local sandboxes; the ACAS service sizes its own, so "
            "drop them with --backend acas");
    }
    return make_backend(kAcas, options.backend_options);
}

std::shared_ptr<acas::AcasBackend> open_acas(const LocalOptions& options) {
    return std::dynamic_pointer_cast<acas::AcasBackend>(
        make_backend(kAcas, options.backend_options));
}

SandboxSpecFields spec_fields(const LocalOptions& options, const SandboxBackend& backend) {
    SandboxSpecFields fields;
    fields.image = options.image;
    if (fields.image->empty()) {
        fields.image = options.backend == kLocal ? "host" : default_image_for(backend);
    }
    fields.egress = parse_egress(options.egress);
    fields.egress_allow = options.allow;
    fields.requires_capabilities = {Capability::exec};
    return fields;
}

// ACAS clients live on the io_context they were made on: every call of one command shares one,
// and the backend is closed on it (which never touches a sandbox).
void close_backend(boost::asio::io_context& io, SandboxBackend& backend, const Context& context) {
    if (backend.name() != kAcas)
        return;
    try {
        run_blocking(io, backend.close());
    } catch (const std::exception& e) {
        context.log->warn("closing the acas backend: {}", e.what());
    }
}

void add_limit_flags(CLI::App& command, LocalOptions& options) {
    command.add_option("--backend", options.backend, "local (default) or acas");
    command.add_option("--floor", options.floor,
                       "Isolation floor; local needs --floor container or lower, an acas-emulator "
                       "the rung it names");
    command.add_option("--image", options.image,
                       "Guest image (default host; with acas: host on an emulator, else ubuntu)");
    command.add_option("--egress", options.egress,
                       "Network egress: closed (default), allowlist or unrestricted; refused "
                       "unless the backend enforces it");
    // One value per occurrence: a repeatable option must not swallow the command after `--`.
    command
        .add_option("--allow", options.allow,
                    "HOST the sandbox may reach (repeatable; needs --egress allowlist)")
        ->allow_extra_args(false);
    add_backend_options(command, options.backend_options);
    command
        .add_option("--max-output", options.max_output,
                    "Per-stream output cap (default 1M; sizes take K, M, G, e.g. 64K)")
        ->transform(byte_size());
    command.add_option("--disk", options.disk, "Writable layer size, e.g. 2G")
        ->transform(byte_size());
    command.add_option("--memory", options.memory, "Memory limit, e.g. 512M (bytes, or K, M, G)")
        ->transform(byte_size());
    command.add_option("--pids", options.pids, "Process limit")->transform(positive_count());
    command
        .add_option("--timeout", options.timeout,
                    "How long before the command's tree is killed: seconds, or 90s, 2m, 1h")
        ->transform(duration());
    command
        .add_option("-e,--env", options.env_pairs,
                    "KEY=VALUE set in the command's environment (repeatable; -e KEY takes this "
                    "environment's value); later ones win over --env-file")
        ->allow_extra_args(false);
    command
        .add_option("--env-file", options.env_files,
                    "A file of KEY=VALUE lines for the command's environment ('#' lines and blank "
                    "lines skipped; repeatable)")
        ->allow_extra_args(false);
    command.add_flag("-t,--tty", options.terminal.tty,
                     "Run the command on a terminal in the sandbox (with -i: an interactive "
                     "session, ^C reaching the program; local backend)");
    command.add_flag("-i,--interactive", options.terminal.interactive,
                     "Keep stdin open and forward it as it comes (local backend)");
    command.add_option("command", options.command, "Command and arguments (after --)")->required();
}

Task<void> print_chunk(StreamPrinter& printer, ExecChunk chunk) {
    printer.write(chunk.stream, chunk.bytes);
    co_return;
}

// Runs the command and prints its streams, as they come where the backend streams; returns its
// exit code. Stdin is forwarded when it is not a terminal. With a `watch`, SIGINT or SIGTERM
// cancels the exec and throws Interrupted.
int run_in(boost::asio::io_context& io, Sandbox& sandbox, const SandboxBackend& backend,
           const LocalOptions& options, InterruptWatch* watch = nullptr) {
    ExecRequest request;
    request.command = options.command;
    request.timeout = Seconds(options.timeout);
    request.max_output_bytes = options.max_output;
    request.environment = options.environment;
    if (options.terminal.tty || options.terminal.interactive) {
        require_terminal(backend, options.terminal);
        return run_on_terminal(sandbox, std::move(request), options.max_output, options.terminal);
    }
    request.stdin_bytes = forwarded_stdin(kMaxTransferBytes);
    const auto finish = [&](Task<ExecResult> exec) {
        return watch != nullptr ? run_interruptibly(io, *watch, std::move(exec))
                                : run_blocking(io, std::move(exec));
    };
    if (!backend.declarations().declares(Capability::streaming_exec)) {
        try {
            return report_exec(finish(sandbox.exec(request)));
        } catch (const ExecOutputLimitExceeded& e) {
            return report_output_limit(e, options.max_output);
        }
    }
    StreamPrinter printer;
    const ExecSink sink = [&printer](ExecChunk chunk) {
        return print_chunk(printer, std::move(chunk));
    };
    try {
        return printer.finished(finish(sandbox.exec_stream(request, sink)));
    } catch (const ExecOutputLimitExceeded& e) {
        return printer.finished(e, options.max_output);
    }
}

struct Listed {
    std::string id;
    std::string state;
    std::string image;
    std::map<std::string, std::string> labels;
};

std::map<std::string, std::string> label_map(const std::vector<std::string>& selectors) {
    std::map<std::string, std::string> labels;
    for (const auto& selector : selectors) {
        const auto eq = selector.find('=');
        if (eq == std::string::npos || eq == 0) {
            throw InvalidArgument(fmt::format(
                "--label '{}' is not k=v; pass a label name, '=', and its value", selector));
        }
        labels[selector.substr(0, eq)] = selector.substr(eq + 1);
    }
    return labels;
}

std::vector<Listed> list_sandboxes(const LocalOptions& options, const Context& context) {
    std::vector<Listed> out;
    if (options.backend == kLocal) {
        local::LocalBackend backend;
        for (auto& info : backend.list(options.labels)) {
            out.push_back(
                Listed{info.id, info.state, info.image, {info.labels.begin(), info.labels.end()}});
        }
        return out;
    }
    auto backend = open_acas(options);
    boost::asio::io_context io;
    auto sandboxes = run_blocking(io, backend->list_sandboxes(label_map(options.labels)));
    close_backend(io, *backend, context);
    for (auto& info : sandboxes) {
        out.push_back(Listed{info.id, info.state, "", info.labels});
    }
    return out;
}

std::string random_thread() {
    return "run-" + random_hex(8);
}

}  // namespace

void add_local_commands(CLI::App& app, Context& context) {
    // run: one shot.
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command = app.add_subcommand(
            "run", "Run one command in a fresh local sandbox, then dispose of it");
        add_limit_flags(*command, *options);
        command
            ->add_option("--in", options->inputs,
                         "HOSTFILE[:GUESTPATH] copied in before the command (repeatable; one "
                         "file, a directory is refused; split at the last ':', so end the value "
                         "with ':' for a host path holding one)")
            ->allow_extra_args(false);
        command
            ->add_option("--out", options->outputs,
                         "GUESTPATH copied out after the command, under its base name in "
                         "--out-dir (repeatable; two that would land on one name are refused)")
            ->allow_extra_args(false);
        command->add_option("--out-dir", options->out_dir,
                            "An existing writable directory where --out files land (default .); "
                            "each lands whole or not at all, and one that cannot land exits 125");
        command->callback([options, &context] {
            for (const auto& arg : options->command) {
                if (arg.find('\0') != std::string::npos) {
                    throw InvalidArgument("the command contains a NUL byte");
                }
            }
            // Everything about the files that can fail is checked before a sandbox exists.
            options->environment = exec_environment(options->env_pairs, options->env_files);
            std::vector<std::pair<InputTransfer, std::string>> inputs;
            for (const auto& value : options->inputs) {
                auto input = parse_input(value);
                auto bytes = read_host_input(input, kMaxTransferBytes);
                inputs.emplace_back(std::move(input), std::move(bytes));
            }
            const auto outputs = plan_outputs(options->outputs);
            if (!outputs.empty()) {
                require_out_dir(options->out_dir);
            }
            auto backend = open_backend(*options);
            require_terminal(*backend, options->terminal);
            auto router = router_for(backend, *options, context);
            auto fields = spec_fields(*options, *backend);
            fields.kind = "run";
            fields.isolation_scope = IsolationScope::call;
            fields.requires_capabilities.insert(Capability::files_in);
            if (!options->outputs.empty()) {
                fields.requires_capabilities.insert(Capability::files_out);
            }
            const SandboxKey key{"cli", random_thread(), options->agent, "run"};
            boost::asio::io_context io;
            // Outlives the cleanup below, so an interrupted run still disposes of its sandbox.
            InterruptWatch watch(io);
            struct Cleanup {
                boost::asio::io_context& io;
                SandboxRouter& router;
                SandboxBackend& backend;
                const SandboxKey& key;
                const Context& context;
                ~Cleanup() {
                    try {
                        const auto purge =
                            run_blocking(io, router.dispose_scope(key.scope, key.thread_id));
                        if (purge.undisposed) {
                            context.log->warn("the run's sandbox was not disposed: {}",
                                              purge.undisposed->detail);
                        }
                    } catch (const std::exception& e) {
                        context.log->warn("disposing the run's sandbox: {}", e.what());
                    }
                    close_backend(io, backend, context);
                }
            } cleanup{io, router, *backend, key, context};
            auto sandbox = run_interruptibly(io, watch, router.acquire(key, SandboxSpec(fields)));
            for (auto& [input, bytes] : inputs) {
                run_interruptibly(io, watch,
                                  sandbox->write_file(input.guest, std::move(bytes), ""));
            }
            context.exit_code = run_in(io, *sandbox, *backend, *options, &watch);
            // An output that cannot land fails the run (125) whatever the program's status: the
            // caller must not read a missing file as a produced one.
            for (const auto& output : outputs) {
                const auto bytes = run_interruptibly(
                    io, watch, sandbox->read_file(output.guest, "", kMaxTransferBytes));
                land_output(options->out_dir, output, bytes);
            }
        });
    }
    // exec: warm reuse by key.
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command =
            app.add_subcommand("exec", "Run a command in the warm local sandbox of a key");
        add_limit_flags(*command, *options);
        auto* scope = command->add_option("--scope", options->scope, "Conversation scope");
        auto* thread = command->add_option("--thread", options->thread, "Conversation thread");
        command
            ->add_option("--id", options->id,
                         "The live sandbox with this id, as `ls` prints it, instead of a "
                         "conversation's (local backend)")
            ->excludes(scope)
            ->excludes(thread);
        command->add_option("--agent", options->agent, "Agent (default cli)");
        command->add_option("--kind", options->kind, "Sandbox kind (default shell)");
        command->callback([options, &context] {
            if (options->id.empty() && (options->scope.empty() || options->thread.empty())) {
                throw InvalidArgument(
                    "exec needs the sandbox: --scope and --thread of a conversation, or --id ID "
                    "of a live sandbox (`maf-sandbox ls` lists them)");
            }
            options->environment = exec_environment(options->env_pairs, options->env_files);
            if (!options->id.empty()) {
                if (options->backend != kLocal) {
                    throw InvalidArgument(
                        "exec --id finds local sandboxes only; with --backend acas name the "
                        "conversation with --scope and --thread");
                }
                auto backend = std::make_shared<local::LocalBackend>(config_from(*options));
                router_for(backend, *options, context);  // the same floor consent as a key's exec
                boost::asio::io_context io;
                context.exit_code = run_in(io, *backend->open(options->id), *backend, *options);
                return;
            }
            auto backend = open_backend(*options);
            require_terminal(*backend, options->terminal);
            auto router = router_for(backend, *options, context);
            auto fields = spec_fields(*options, *backend);
            fields.kind = options->kind;
            boost::asio::io_context io;
            struct Close {
                boost::asio::io_context& io;
                SandboxBackend& backend;
                const Context& context;
                ~Close() { close_backend(io, backend, context); }
            } close{io, *backend, context};
            auto sandbox = run_blocking(
                io, router.acquire({options->scope, options->thread, options->agent, ""},
                                   SandboxSpec(fields)));
            report_replacement(*sandbox);
            context.exit_code = run_in(io, *sandbox, *backend, *options);
        });
    }
    // ls
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command = app.add_subcommand("ls", "List sandboxes (local, or the ACAS group's)");
        command->add_option("--backend", options->backend, "local (default) or acas");
        command->add_option("--label", options->labels,
                            "k=v selector (repeatable, all must match)");
        command->add_flag("--json", options->json, "A JSON array of {id, labels, image, state}");
        add_backend_options(*command, options->backend_options);
        command->callback([options, &context] {
            require_known_backend(*options);
            const auto sandboxes = list_sandboxes(*options, context);
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
                std::cout << fmt::format("{}  {}  {}  {}\n", info.id, info.state,
                                         info.image.empty() ? "-" : info.image, labels);
            }
        });
    }
    // rm
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command = app.add_subcommand("rm", "Remove sandboxes by id");
        command->add_option("--backend", options->backend, "local (default) or acas");
        command->add_option("ids", options->ids, "Sandbox ids")->required();
        add_backend_options(*command, options->backend_options);
        command->callback([options, &context] {
            require_known_backend(*options);
            boost::asio::io_context io;
            std::shared_ptr<acas::AcasBackend> service;
            std::optional<local::LocalBackend> local_backend;
            if (options->backend == kAcas) {
                service = open_acas(*options);
            } else {
                local_backend.emplace();
            }
            for (const auto& id : options->ids) {
                const bool removed = service ? run_blocking(io, service->remove_sandbox(id))
                                             : local_backend->remove(id);
                if (!removed) {
                    context.log->error("no sandbox {}", id);
                    context.exit_code = kExitFailed;
                }
            }
            if (service) {
                close_backend(io, *service, context);
            }
        });
    }
    // purge
    {
        auto options = std::make_shared<LocalOptions>();
        auto* command =
            app.add_subcommand("purge", "Remove every sandbox of a conversation (by label)");
        command->add_option("--backend", options->backend, "local (default) or acas");
        command->add_option("--scope", options->scope, "Conversation scope")->required();
        command->add_option("--thread", options->thread, "Conversation thread")->required();
        add_backend_options(*command, options->backend_options);
        command->callback([options, &context] {
            require_known_backend(*options);
            if (options->backend == kLocal) {
                local::LocalBackend backend;
                std::cout << backend.purge(options->scope, options->thread) << "\n";
                return;
            }
            auto backend = open_acas(*options);
            boost::asio::io_context io;
            const auto purge =
                run_blocking(io, backend->dispose_scope(options->scope, options->thread));
            close_backend(io, *backend, context);
            std::cout << purge.disposed << "\n";
            if (purge.undisposed) {
                context.log->error("the purge is incomplete ({}): {}",
                                   to_string(purge.undisposed->code), purge.undisposed->detail);
                context.exit_code = kExitFailed;
            }
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
                "examined {}, alive {}, reclaimed {}, orphan dirs removed {}, image leftovers "
                "removed {}, failed {}\n",
                report.examined, report.alive, report.reclaimed, report.orphan_dirs_removed,
                report.image_leftovers_removed, report.failed);
            for (const auto& error : report.errors) {
                context.log->error("{}", error);
            }
            if (report.failed > 0) {
                context.exit_code = kExitFailed;
            }
        });
    }
}

}  // namespace maf_sandbox::cli
