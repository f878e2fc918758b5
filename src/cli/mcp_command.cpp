// `maf-sandbox mcp`: the kinds (execute_code, run_shell) as an MCP server over stdio, or over
// streamable HTTP at /mcp with --http. Backend and policy come from a JSON config file and flags
// (flags win); every call goes through a SandboxRouter.
#include <fmt/format.h>
#include <spdlog/logger.h>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backends.hpp"
#include "cli.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/in_process.hpp"
#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/kinds/codeact.hpp"
#include "maf_sandbox/kinds/shell.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/mcp/http_guard.hpp"
#include "maf_sandbox/mcp/http_transport.hpp"
#include "maf_sandbox/mcp/server.hpp"
#include "maf_sandbox/mcp/stdio_transport.hpp"
#include "maf_sandbox/runtime/host/host_checks.hpp"
#include "option_parsing.hpp"

namespace maf_sandbox::cli {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

constexpr const char* kDefaultBackend = "local";
constexpr const char* kInProcessBackend = "in-process";

// Everything the command can be told, from the config file and then the flags. Unset means "not
// said", so the defaults below apply only to what nobody said.
struct McpOptions {
    std::optional<std::string> http;
    std::optional<std::string> backend;
    std::optional<std::string> floor;
    std::optional<std::string> image;
    std::optional<std::string> egress;
    std::vector<std::string> allow;
    std::optional<std::string> files;
    std::optional<std::string> out_dir;
    std::vector<std::string> outputs;
    std::optional<double> timeout;
    std::optional<std::uint64_t> max_output;
    std::optional<std::string> scope;
    std::optional<std::string> thread;
    std::optional<std::string> work_dir;
    std::optional<bool> allow_remote;
    std::optional<std::size_t> max_session_sandboxes;
    // What execute_code may hand back and how much (the spec's files_out, the inline cap).
    std::optional<bool> no_call_outputs;
    std::optional<std::uint64_t> max_output_files;
    std::optional<std::uint64_t> max_output_file_bytes;
    std::optional<std::uint64_t> max_output_call_bytes;
    std::optional<std::uint64_t> max_inline_image_bytes;
};

std::uint64_t config_count(const json::value& value, std::string_view field) {
    if (!value.is_int64() && !value.is_uint64()) {
        throw InvalidArgument(fmt::format("config field '{}' must be a whole number", field));
    }
    return value.to_number<std::uint64_t>();
}

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw InvalidArgument(
            fmt::format("option '--config': cannot read '{}': {}", path, std::strerror(errno)));
    }
    std::ostringstream content;
    content << in.rdbuf();
    return content.str();
}

std::string config_string(const json::value& value, std::string_view field) {
    if (!value.is_string()) {
        throw InvalidArgument(fmt::format("config field '{}' must be a string", field));
    }
    return std::string(value.get_string());
}

std::vector<std::string> config_strings(const json::value& value, std::string_view field) {
    if (!value.is_array()) {
        throw InvalidArgument(fmt::format("config field '{}' must be a list of strings", field));
    }
    std::vector<std::string> items;
    for (const auto& item : value.get_array()) {
        items.push_back(config_string(item, field));
    }
    return items;
}

// The config file: a JSON object whose fields are the flags' long names (with `-` as `_`).
McpOptions read_config(const std::string& path) {
    boost::system::error_code error;
    auto parsed = json::parse(read_text_file(path), error);
    if (error || !parsed.is_object()) {
        throw InvalidArgument(
            fmt::format("config '{}' is not a JSON object; see `maf-sandbox mcp --help`", path));
    }
    McpOptions options;
    for (const auto& [key, value] : parsed.get_object()) {
        const std::string field(key);
        if (field == "http") {
            options.http = config_string(value, field);
        } else if (field == "backend") {
            options.backend = config_string(value, field);
        } else if (field == "floor") {
            options.floor = config_string(value, field);
        } else if (field == "image") {
            options.image = config_string(value, field);
        } else if (field == "egress") {
            options.egress = config_string(value, field);
        } else if (field == "allow") {
            options.allow = config_strings(value, field);
        } else if (field == "files") {
            options.files = config_string(value, field);
        } else if (field == "out_dir") {
            options.out_dir = config_string(value, field);
        } else if (field == "outputs") {
            options.outputs = config_strings(value, field);
        } else if (field == "scope") {
            options.scope = config_string(value, field);
        } else if (field == "work_dir") {
            options.work_dir = config_string(value, field);
        } else if (field == "allow_remote") {
            if (!value.is_bool()) {
                throw InvalidArgument("config field 'allow_remote' must be true or false");
            }
            options.allow_remote = value.get_bool();
        } else if (field == "max_session_sandboxes") {
            if (!value.is_int64() && !value.is_uint64()) {
                throw InvalidArgument(
                    "config field 'max_session_sandboxes' must be a whole number of sandboxes");
            }
            options.max_session_sandboxes = value.to_number<std::size_t>();
        } else if (field == "no_call_outputs") {
            if (!value.is_bool()) {
                throw InvalidArgument("config field 'no_call_outputs' must be true or false");
            }
            options.no_call_outputs = value.get_bool();
        } else if (field == "max_output_files") {
            options.max_output_files = config_count(value, field);
        } else if (field == "max_output_file_bytes") {
            options.max_output_file_bytes = config_count(value, field);
        } else if (field == "max_output_call_bytes") {
            options.max_output_call_bytes = config_count(value, field);
        } else if (field == "max_inline_image_bytes") {
            options.max_inline_image_bytes = config_count(value, field);
        } else if (field == "timeout") {
            if (!value.is_number()) {
                throw InvalidArgument("config field 'timeout' must be a number of seconds");
            }
            options.timeout = value.to_number<double>();
        } else if (field == "max_output") {
            if (!value.is_int64() && !value.is_uint64()) {
                throw InvalidArgument("config field 'max_output' must be a whole number of bytes");
            }
            options.max_output = value.to_number<std::uint64_t>();
        } else {
            throw InvalidArgument(fmt::format(
                "config field '{}' is unknown; use the flags' long names, e.g. backend, floor, "
                "image, egress, allow, files, out_dir, outputs, timeout, max_output, scope, "
                "allow_remote, max_session_sandboxes, no_call_outputs, max_output_files, "
                "max_output_file_bytes, max_output_call_bytes, max_inline_image_bytes",
                field.substr(0, 60)));
        }
    }
    return options;
}

// Flags override the file; lists given as flags replace the file's lists.
McpOptions merge(McpOptions file, const McpOptions& flags) {
    auto take = [](auto& into, const auto& from) {
        if (from) {
            into = from;
        }
    };
    take(file.http, flags.http);
    take(file.backend, flags.backend);
    take(file.floor, flags.floor);
    take(file.image, flags.image);
    take(file.egress, flags.egress);
    take(file.files, flags.files);
    take(file.out_dir, flags.out_dir);
    take(file.timeout, flags.timeout);
    take(file.max_output, flags.max_output);
    take(file.scope, flags.scope);
    take(file.thread, flags.thread);
    take(file.work_dir, flags.work_dir);
    if (flags.allow_remote.value_or(false)) {
        file.allow_remote = true;  // an absent flag reads as false, which must not undo the file
    }
    take(file.max_session_sandboxes, flags.max_session_sandboxes);
    if (flags.no_call_outputs.value_or(false)) {
        file.no_call_outputs = true;
    }
    take(file.max_output_files, flags.max_output_files);
    take(file.max_output_file_bytes, flags.max_output_file_bytes);
    take(file.max_output_call_bytes, flags.max_output_call_bytes);
    take(file.max_inline_image_bytes, flags.max_inline_image_bytes);
    if (!flags.allow.empty()) {
        file.allow = flags.allow;
    }
    if (!flags.outputs.empty()) {
        file.outputs = flags.outputs;
    }
    return file;
}

bool nothing_said(const McpOptions& options) {
    return !options.http && !options.backend && !options.floor && !options.image &&
           !options.egress && options.allow.empty() && !options.files && !options.out_dir &&
           options.outputs.empty() && !options.timeout && !options.max_output && !options.scope &&
           !options.thread && !options.work_dir && !options.allow_remote.value_or(false) &&
           !options.max_session_sandboxes && !options.no_call_outputs.value_or(false) &&
           !options.max_output_files && !options.max_output_file_bytes &&
           !options.max_output_call_bytes && !options.max_inline_image_bytes;
}

std::pair<std::string, std::uint16_t> parse_listen(const std::string& text) {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
        throw InvalidArgument(
            fmt::format("option '--http': '{}' is not HOST:PORT; e.g. 127.0.0.1:8080", text));
    }
    auto host = text.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    int port = 0;
    try {
        std::size_t used = 0;
        port = std::stoi(text.substr(colon + 1), &used);
        if (used != text.size() - colon - 1) {
            port = -1;
        }
    } catch (const std::exception&) {
        port = -1;
    }
    if (port < 0 || port > 65535) {
        throw InvalidArgument(
            fmt::format("option '--http': '{}' has no valid port (0-65535)", text));
    }
    return {host, static_cast<std::uint16_t>(port)};
}

// The in-process fake scripts exec instead of running anything; for the MCP server it declares
// exec so the protocol path can be exercised end to end without a real sandbox.
std::shared_ptr<SandboxBackend> backend_named(const std::string& name) {
    if (name == kInProcessBackend) {
        InProcessBackendOptions options;
        options.declarations.capabilities.insert(Capability::exec);
        InProcessSandboxOptions sandbox;
        sandbox.default_stdout =
            "(in-process backend: nothing was executed; use --backend local to run code)\n";
        return std::make_shared<InProcessSandboxBackend>(
            std::make_shared<InProcessSandbox>(std::move(sandbox)), std::move(options));
    }
    if (name == "local") {
        // Refused at start, with doctor's explanation, rather than failing every call later.
        runtime::ensure_local_backend_can_start();
        // The server's sandboxes must not outlive it, whatever ends it (SIGKILL included).
        local::LocalBackendConfig config;
        config.egress_operator = runtime::EgressOperatorOptions::from_environment();
        config.owned_by_this_process = true;
        return std::make_shared<local::LocalBackend>(std::move(config));
    }
    return make_backend(name);
}

struct Service {
    std::optional<std::string> image;  // checked at start
    std::shared_ptr<SandboxRouter> router;
    std::unique_ptr<mcp::McpServer> server;
};

Service build_service(const McpOptions& options, Context& context) {
    const bool defaults = nothing_said(options);
    const auto backend_name = options.backend.value_or(kDefaultBackend);
    Isolation floor = Isolation::microvm;
    if (options.floor) {
        try {
            floor = parse_isolation(*options.floor);
        } catch (const InvalidArgument& e) {
            throw InvalidArgument(fmt::format("option '--floor': {}", e.what()));
        }
    } else if (backend_name == kDefaultBackend) {
        // The one place a default lowers the floor: whoever starts a local MCP server without
        // saying otherwise has chosen local isolation.
        floor = Isolation::container;
        context.log->warn(
            "{}serving the local backend with the isolation floor lowered to container (the "
            "default is microvm); pass --floor to change it",
            defaults ? "no config and no flags: " : "");
    }

    // Built first: an image nobody named is the one `run` would use on this backend.
    auto backend = backend_named(backend_name);
    kinds::SandboxSettings settings;
    settings.image = options.image;
    if (!settings.image) {
        if (auto image = default_image_for(*backend); !image.empty()) {
            settings.image = std::move(image);
        }
    }
    settings.work_dir = options.work_dir;
    if (options.egress && *options.egress != "closed" && *options.egress != "allowlist") {
        throw InvalidArgument(fmt::format(
            "option '--egress': '{}' is not offered; use closed or allowlist (a kind never asks "
            "for unrestricted egress)",
            *options.egress));
    }
    if (options.egress == std::optional<std::string>("allowlist") && options.allow.empty()) {
        throw InvalidArgument("option '--egress allowlist' needs at least one --allow HOST");
    }
    if (options.egress == std::optional<std::string>("closed") && !options.allow.empty()) {
        throw InvalidArgument("option '--allow' contradicts '--egress closed'; drop one of them");
    }
    settings.egress_allow = options.allow;
    if (options.timeout) {
        settings.timeout = Seconds{*options.timeout};
    }
    if (options.max_output) {
        settings.max_output_bytes = *options.max_output;
    }
    if (options.max_output_files) {
        settings.files_out.max_files = *options.max_output_files;
    }
    if (options.max_output_file_bytes) {
        settings.files_out.max_bytes_per_file = *options.max_output_file_bytes;
    }
    if (options.max_output_call_bytes) {
        settings.files_out.max_total_bytes = *options.max_output_call_bytes;
    }

    kinds::CodeActConfig codeact_config;
    codeact_config.sandbox = settings;
    // Names or globs; a program that writes none of them is not an error at this front end.
    codeact_config.output_patterns = options.outputs;
    codeact_config.outputs_per_call = !options.no_call_outputs.value_or(false);
    if (options.out_dir) {
        std::filesystem::create_directories(*options.out_dir);
        if (codeact_config.output_patterns.empty() && !codeact_config.outputs_per_call) {
            context.log->warn(
                "--out-dir {} is given, but nothing can land there: --no-call-outputs refuses "
                "outputs named per call and no --output names any; drop --no-call-outputs or add "
                "--output NAME",
                *options.out_dir);
        }
    }
    auto store = options.files ? std::make_shared<kinds::FileStore>(*options.files)
                               : std::make_shared<kinds::FileStore>();

    SandboxRouterOptions router_options;
    router_options.min_isolation = floor;
    router_options.log = context.log;
    Service service;
    service.image = settings.image;
    service.router = std::make_shared<SandboxRouter>(
        std::vector<std::shared_ptr<SandboxBackend>>{backend}, router_options);
    // Outputs land per call through the server's sink (--out-dir/<session>/<call>/).
    auto codeact = std::make_shared<kinds::CodeActTool>(service.router, codeact_config, store,
                                                        std::nullopt, context.log);
    auto shell = std::make_shared<kinds::ShellTool>(service.router, kinds::ShellConfig{settings},
                                                    context.log);
    mcp::McpServerConfig config;
    config.server_version = MAF_SANDBOX_VERSION;
    if (options.out_dir) {
        config.out_dir = std::filesystem::absolute(*options.out_dir);
    }
    if (options.max_inline_image_bytes) {
        config.max_inline_image_bytes = *options.max_inline_image_bytes;
    }
    if (options.thread) {
        config.thread = *options.thread;
    }
    if (options.scope) {
        config.scope = *options.scope;
    }
    if (options.max_session_sandboxes) {
        if (*options.max_session_sandboxes == 0) {
            throw InvalidArgument(
                "option '--max-session-sandboxes': 0 would let no tool call run; give at least 1");
        }
        config.max_session_sandboxes = *options.max_session_sandboxes;
    }
    service.server = std::make_unique<mcp::McpServer>(config, service.router, std::move(codeact),
                                                      std::move(shell), context.log);
    context.log->info("backend {} (isolation {}), floor {}, egress {}", backend->name(),
                      to_string(backend->isolation()), to_string(floor),
                      settings.egress_allow.empty() ? "closed" : "allowlist");
    return service;
}

// The bearer token: MAF_SANDBOX_MCP_TOKEN when set, else a fresh random one printed to stderr
// once (never to the log, which may be kept).
std::string bearer_token() {
    if (const char* given = std::getenv(mcp::kMcpTokenEnv); given != nullptr && *given != '\0') {
        return given;
    }
    auto token = mcp::generate_bearer_token();
    std::fprintf(stderr,
                 "MCP bearer token (send `Authorization: Bearer <token>`; set %s to choose "
                 "your own):\n%s\n",
                 mcp::kMcpTokenEnv, token.c_str());
    std::fflush(stderr);
    return token;
}

Task<void> serve_http_until_signal(mcp::McpHttpServer& http) {
    asio::signal_set signals(co_await asio::this_coro::executor, SIGTERM, SIGINT);
    co_await signals.async_wait(asio::use_awaitable);
    co_await http.stop();
}

void run(const McpOptions& flags, const std::optional<std::string>& config_path, Context& context) {
    if (!context.log_level_chosen) {
        context.log->set_level(spdlog::level::info);
    }
    const auto options = merge(config_path ? read_config(*config_path) : McpOptions{}, flags);
    // Declared before the service, so it outlives it: the backends' pooled connections (ACAS) are
    // bound to it and close their sockets through it when the service goes.
    asio::io_context io;
    auto service = build_service(options, context);

    if (service.image) {
        run_blocking(io, check_image(*service.router->backend(), *service.image));
        io.restart();
    }
    std::exception_ptr failure;
    auto finished = [&](std::exception_ptr error) {
        failure = error;
        io.stop();
    };
    std::unique_ptr<mcp::McpHttpServer> http;
    if (options.http) {
        auto [host, port] = parse_listen(*options.http);
        mcp::McpHttpOptions http_options;
        http_options.host = host;
        http_options.port = port;
        http_options.allow_remote = options.allow_remote.value_or(false);
        if (!http_options.allow_remote && !mcp::is_loopback_bind(host)) {
            throw InvalidArgument(fmt::format(
                "option '--http': '{}' is not a loopback address, and the MCP endpoint runs code "
                "for whoever reaches it; listen on 127.0.0.1, or add --allow-remote (every "
                "request then still needs the bearer token)",
                host));
        }
        http_options.token = bearer_token();
        http = std::make_unique<mcp::McpHttpServer>(io.get_executor(), *service.server,
                                                    std::move(http_options));
        const auto bound = http->start();
        context.log->info("serving MCP over streamable HTTP at http://{}:{}{}",
                          host.find(':') == std::string::npos ? host : "[" + host + "]", bound,
                          mcp::kMcpPath);
        asio::co_spawn(io, serve_http_until_signal(*http), finished);
    } else {
        // CLI11 sets a flag's optional to false when it is absent: only a true one was said.
        if (options.allow_remote.value_or(false)) {
            throw InvalidArgument("option '--allow-remote' needs --http HOST:PORT");
        }
        context.log->info("serving MCP over stdio");
        asio::co_spawn(io, mcp::serve_stdio(*service.server), finished);
    }
    io.run();
    if (failure) {
        std::rethrow_exception(failure);
    }
}

}  // namespace

void add_mcp_command(CLI::App& app, Context& context) {
    auto* command = app.add_subcommand(
        "mcp",
        "Serve the execute_code and run_shell tools as a Model Context Protocol server (stdio by "
        "default, streamable HTTP at /mcp with --http). With no config and no flags: the local "
        "backend with the isolation floor set to container. Over HTTP every request needs the "
        "bearer token: MAF_SANDBOX_MCP_TOKEN, or a random one printed to stderr at start.");
    auto flags = std::make_shared<McpOptions>();
    auto config_path = std::make_shared<std::optional<std::string>>();
    command->add_option("--http", flags->http, "Serve streamable HTTP at HOST:PORT (path /mcp)");
    command->add_option("--config", *config_path,
                        "JSON config file; fields are the long flag names (out_dir, max_output)");
    command->add_option("--backend", flags->backend, "local, acas or in-process (default local)");
    command->add_option("--floor", flags->floor,
                        "Isolation floor (default microvm; container for the local backend)");
    command->add_option("--image", flags->image, "Image the sandboxes run");
    command->add_option("--egress", flags->egress, "closed (default) or allowlist");
    command->add_option("--allow", flags->allow, "A host the guest may reach (repeatable)");
    command->add_option("--files", flags->files,
                        "Host directory of the file store execute_code copies inputs from");
    command->add_option("--out-dir", flags->out_dir,
                        "Host directory returned files also land in, as <session>/<call>/<name>");
    command->add_option("--output", flags->outputs,
                        "A name or glob of files execute_code returns from its working directory "
                        "after every call (repeatable); calls can name more with 'outputs'");
    command->add_flag("--no-call-outputs", flags->no_call_outputs,
                      "Refuse execute_code's 'outputs' argument (only --output files return)");
    command->add_option(
        "--max-output-files", flags->max_output_files,
        fmt::format("Files one call may return (default {})", kDefaultTransferLimits.max_files));
    command
        ->add_option("--max-output-file-bytes", flags->max_output_file_bytes,
                     fmt::format("Bytes per returned file (default {})",
                                 kDefaultTransferLimits.max_bytes_per_file))
        ->transform(byte_size());
    command
        ->add_option("--max-output-call-bytes", flags->max_output_call_bytes,
                     fmt::format("Bytes all files of one call may total (default {})",
                                 kDefaultTransferLimits.max_total_bytes))
        ->transform(byte_size());
    command
        ->add_option("--max-inline-image-bytes", flags->max_inline_image_bytes,
                     fmt::format("Images up to this size come back inline as image content "
                                 "(default {})",
                                 mcp::kDefaultMaxInlineImageBytes))
        ->transform(byte_size());
    command
        ->add_option("--timeout", flags->timeout,
                     "How long a program may run: seconds, or 90s, 2m (default 60)")
        ->transform(duration());
    command
        ->add_option("--max-output", flags->max_output,
                     "Per output stream, e.g. 64K; more is refused, not truncated")
        ->transform(byte_size());
    command->add_option("--scope", flags->scope, "The sandbox key's scope for every session");
    command->add_option("--thread", flags->thread,
                        "The sandbox key's thread for every session (default: the session's id); "
                        "servers with the same scope and thread share their sandboxes");
    command->add_option("--work-dir", flags->work_dir, "Guest base for the per-call directories");
    command->add_flag(
        "--allow-remote", flags->allow_remote,
        "With --http: allow a non-loopback HOST (refused otherwise); the token still guards it");
    command->add_option(
        "--max-session-sandboxes", flags->max_session_sandboxes,
        fmt::format("Sandboxes one MCP session may hold at once; a call beyond it is refused "
                    "(default {})",
                    mcp::kDefaultMaxSessionSandboxes));
    command->callback([flags, config_path, &context] { run(*flags, *config_path, context); });
}

}  // namespace maf_sandbox::cli
