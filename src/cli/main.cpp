#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "doctor_command.hpp"
#include "interrupt.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "option_parsing.hpp"

namespace {

// A result the caller never receives is a failure: stdout on a full disk, a closed pipe. Both
// stream layers are flushed and their errors read, or the command would exit 0 having lost it.
bool stdout_delivered() {
    std::cout.flush();
    const bool stream_ok = static_cast<bool>(std::cout);
    return std::fflush(stdout) == 0 && std::ferror(stdout) == 0 && stream_ok;
}

}  // namespace

int main(int argc, char** argv) {
    namespace cli = maf_sandbox::cli;
    cli::Context context{spdlog::stderr_color_mt("maf-sandbox")};
    context.log->set_pattern("%^%l%$: %v");
    context.log->set_level(spdlog::level::warn);

    CLI::App app{
        "maf-sandbox: run agent-authored code somewhere else, behind a router that refuses what a "
        "backend cannot honour",
        // Named, not taken from argv[0]: --help shows the command as a person types it, never
        // the path this binary was started from.
        "maf-sandbox"};
    app.set_version_flag("--version", std::string("maf-sandbox ") + MAF_SANDBOX_VERSION);
    app.require_subcommand(1);
    app.footer(cli::kExitStatusHelp);
    try {
        cli::add_log_options(app, context);
    } catch (const maf_sandbox::InvalidArgument& e) {
        context.log->error("{}", e.what());
        return cli::kExitFailed;
    }
    cli::add_bench_command(app, context);
    cli::add_check_command(app, context);
    cli::add_conformance_command(app, context);
    cli::add_cp_command(app, context);
    cli::add_doctor_command(app, context);
    cli::add_egress_command(app, context);
    cli::add_images_command(app, context);
    cli::add_local_commands(app, context);
    cli::add_mcp_command(app, context);
    cli::add_pool_command(app, context);

    int status = cli::kExitFailed;
    try {
        app.parse(argc, argv);
        status = context.exit_code;
    } catch (const CLI::ParseError& e) {
        // --help and --version are ParseErrors that exit 0. A mistyped word is answered with the
        // closest known one rather than CLI11's own account of what it did with it.
        const auto unknown =
            e.get_exit_code() == 0 ? std::string() : cli::explain_unknown_word(app, argc, argv);
        if (!unknown.empty()) {
            context.log->error("{}", unknown);
            status = cli::kExitFailed;
        } else {
            status = app.exit(e) == 0 ? cli::kExitOk : cli::kExitFailed;
        }
    } catch (const cli::Interrupted& e) {
        // The command's own cleanup has run (a run's sandbox is disposed) by the time it gets here.
        context.log->warn("{}; stopped, and the command's sandbox was disposed", e.what());
        status = e.exit_status();
    } catch (const maf_sandbox::InvalidArgument& e) {
        context.log->error("{}", e.what());
    } catch (const maf_sandbox::Error& e) {
        context.log->error("{}: {}", e.type_name(), e.what());
    } catch (const std::exception& e) {
        context.log->error("{}", e.what());
    }
    if (!stdout_delivered()) {
        context.log->error(
            "writing the result to standard output failed ({}); the result is lost: check the "
            "file system or pipe standard output goes to",
            std::strerror(errno));
        return cli::kExitFailed;
    }
    return status;
}
