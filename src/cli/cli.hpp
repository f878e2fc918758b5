// Shared plumbing of the `maf-sandbox` subcommands. Each subcommand lives in its own file and
// registers itself through one add_*_command function.
#pragma once

#include <memory>
#include <string>

#include <spdlog/logger.h>

namespace CLI {
class App;
}

namespace maf_sandbox::cli {

// Exit statuses shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRefused = 1;   // a policy refusal, a failed probe, a failed command
inline constexpr int kExitBadInput = 2;  // bad flags, malformed JSON, unknown enum strings

struct Context {
    std::shared_ptr<spdlog::logger> log;  // writes to stderr; stdout is for results only
    int exit_code = kExitOk;
};

void add_bench_command(CLI::App& app, Context& context);  // bench (issue 9)
void add_check_command(CLI::App& app, Context& context);
void add_conformance_command(CLI::App& app, Context& context);
void add_egress_command(CLI::App& app, Context& context);  // egress-log
void add_images_command(CLI::App& app, Context& context);
void add_local_commands(CLI::App& app, Context& context);  // run exec ls rm purge gc
void add_mcp_command(CLI::App& app, Context& context);

}  // namespace maf_sandbox::cli
