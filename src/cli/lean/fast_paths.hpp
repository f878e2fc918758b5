// The two commands agents repeat most, served without the full CLI's start-up (the bench's
// whole-process `cli_` scenarios): a warm `exec` in the live sandbox of a key, and a one-shot `run`
// served from the shared pool. Each returns nullopt, having changed nothing a retry through the
// full CLI could notice, when it cannot serve the call (no live sandbox yet, no matching pool, a
// floor the local backend does not meet); the caller then hands the command to the full CLI, which
// creates or refuses with its own messages. Once the command has started, they return its exit
// status.
#pragma once

#include <optional>

#include "lean_args.hpp"

namespace maf_sandbox::cli::lean {

std::optional<int> warm_exec(const LeanArgs& args);
std::optional<int> pooled_run(const LeanArgs& args);

}  // namespace maf_sandbox::cli::lean
