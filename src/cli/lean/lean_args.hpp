// The flags of `run` and `exec` that the lean front end serves itself. Anything else (another
// command, --help, an ACAS flag, --in/--out, a value in an unusual spelling) is not parsed here
// but handed whole to the full CLI, which owns every message about bad input.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace maf_sandbox::cli::lean {

struct LeanArgs {
    std::string command;  // "run" or "exec"
    std::string floor = "microvm";
    std::string image = "host";
    std::uint64_t max_output = 1u << 20;
    std::optional<std::uint64_t> memory, pids, disk;
    double timeout = 60.0;
    std::string scope, thread, agent = "cli", kind = "shell";  // exec only
    std::map<std::string, std::string> environment;            // from -e and --env-file
    std::vector<std::string> argv;                             // after `--`
};

// nullopt unless every argument is one the lean path understands, spelled plainly.
std::optional<LeanArgs> parse_lean_args(int argc, char** argv);

}  // namespace maf_sandbox::cli::lean
