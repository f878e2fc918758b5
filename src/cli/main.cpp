#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "maf_sandbox/core/errors.hpp"

int main(int argc, char** argv) {
    namespace cli = maf_sandbox::cli;
    cli::Context context{spdlog::stderr_color_mt("maf-sandbox")};
    context.log->set_pattern("%^%l%$: %v");
    context.log->set_level(spdlog::level::warn);

    CLI::App app{
        "maf-sandbox: run agent-authored code somewhere else, behind a router that refuses what a "
        "backend cannot honour"};
    app.set_version_flag("--version", std::string("maf-sandbox ") + MAF_SANDBOX_VERSION);
    app.require_subcommand(1);
    cli::add_bench_command(app, context);
    cli::add_check_command(app, context);
    cli::add_conformance_command(app, context);
    cli::add_egress_command(app, context);
    cli::add_images_command(app, context);
    cli::add_local_commands(app, context);
    cli::add_mcp_command(app, context);
    cli::add_pool_command(app, context);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int status = app.exit(e);
        return status == 0 ? 0 : cli::kExitBadInput;
    } catch (const maf_sandbox::InvalidArgument& e) {
        context.log->error("{}", e.what());
        return cli::kExitBadInput;
    } catch (const maf_sandbox::Error& e) {
        context.log->error("{}: {}", e.type_name(), e.what());
        return cli::kExitRefused;
    } catch (const std::exception& e) {
        context.log->error("{}", e.what());
        return cli::kExitRefused;
    }
    return context.exit_code;
}
