// The lean front end's way out: the full CLI, `maf-sandbox-cli`, installed next to it.
#pragma once

#include <string>
#include <vector>

namespace maf_sandbox::cli::lean {

// <directory of this executable>/maf-sandbox-cli.
std::string full_cli_path();

// Replaces this process with the full CLI, same arguments (argv[0] kept, so its messages name
// `maf-sandbox`). Returns only when that fails, having said why on stderr.
void exec_full_cli(char** argv);

// Starts the full CLI with `arguments`, detached (own session, stdio on /dev/null), without
// waiting for it. False when it could not be started.
bool spawn_full_cli_detached(const std::vector<std::string>& arguments);

}  // namespace maf_sandbox::cli::lean
