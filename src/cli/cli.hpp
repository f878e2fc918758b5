// Shared plumbing of the `maf-sandbox` subcommands. Each subcommand lives in its own file and
// registers itself through one add_*_command function.
#pragma once

#include <memory>
#include <string>

#include <spdlog/logger.h>

#include "exit_status.hpp"

namespace CLI {
class App;
}

namespace maf_sandbox::cli {

struct Context {
    std::shared_ptr<spdlog::logger> log;  // writes to stderr; stdout is for results only
    int exit_code = kExitOk;
    // -v, --log-level or MAF_SANDBOX_LOG named the level: a command keeps it rather than its own
    // default (mcp's is info).
    bool log_level_chosen = false;
};

// -v/--verbose (repeatable: info, debug, trace) and --log-level LEVEL on `app` and, falling
// through, on every command; MAF_SANDBOX_LOG when neither is given. Throws InvalidArgument for a
// MAF_SANDBOX_LOG that names no level.
void add_log_options(CLI::App& app, Context& context);

void add_bench_command(CLI::App& app, Context& context);  // bench (the harness is src/bench)
void add_check_command(CLI::App& app, Context& context);
void add_conformance_command(CLI::App& app, Context& context);
void add_cp_command(CLI::App& app, Context& context);      // cp SRC DST, ID:PATH on one side
void add_egress_command(CLI::App& app, Context& context);  // egress-log
void add_images_command(CLI::App& app, Context& context);
void add_local_commands(CLI::App& app, Context& context);  // run exec ls rm purge gc
void add_mcp_command(CLI::App& app, Context& context);
void add_pool_command(CLI::App& app, Context& context);  // the shared pool `run` takes from

}  // namespace maf_sandbox::cli
