// `maf-sandbox`: a lean front end. Agents call `exec` (and one-shot `run`) tens of times per turn,
// and the full CLI's start-up alone (the dynamic loader binding two dozen shared libraries:
// OpenSSL, Beast's users, libarchive with ICU) cost more than bwrap's whole run. This executable
// links only what a warm exec and a pooled run need, serves those itself, and hands every other
// command, and every case it cannot serve, to the full CLI (`maf-sandbox-cli`) unchanged. Its exit
// statuses are the full CLI's (exit_status.hpp): the program's own, or 125 for its own failure.
#include <cstdio>
#include <cstring>

#include "../exit_status.hpp"
#include "fast_paths.hpp"
#include "full_cli.hpp"
#include "lean_args.hpp"
#include "maf_sandbox/core/errors.hpp"

int main(int argc, char** argv) {
    namespace cli = maf_sandbox::cli;
    namespace lean = maf_sandbox::cli::lean;
    if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
        std::puts("maf-sandbox " MAF_SANDBOX_VERSION);
        return cli::kExitOk;
    }
    if (const auto args = lean::parse_lean_args(argc, argv)) {
        try {
            const auto status =
                args->command == "exec" ? lean::warm_exec(*args) : lean::pooled_run(*args);
            if (status) {
                return *status;
            }
        } catch (const maf_sandbox::InvalidArgument& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            return cli::kExitFailed;
        } catch (const maf_sandbox::Error& e) {
            // An exec racing a purge or gc lands here too (the record or supervisor went away
            // under it): the sandbox's failure, 125, never a program's status.
            const auto type = e.type_name();
            std::fprintf(stderr, "error: %.*s: %s\n", static_cast<int>(type.size()), type.data(),
                         e.what());
            return cli::kExitFailed;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            return cli::kExitFailed;
        }
    }
    lean::exec_full_cli(argv);
    return cli::kExitFailed;
}
