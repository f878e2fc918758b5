// `maf-sandbox doctor` (doctor_command.cpp): the host checks, root or rootless.
#pragma once

#include <CLI/CLI.hpp>

#include "cli.hpp"

namespace maf_sandbox::cli {

void add_doctor_command(CLI::App& app, Context& context);

}  // namespace maf_sandbox::cli
