// `maf-sandbox doctor`: what this host offers the local backend, one check a line with the fix
// for each that is not OK (host_checks.hpp). Exits 0 when the local backend can start here, 1 (the
// answer "no", as `check` gives it) when it cannot.
#include <CLI/CLI.hpp>
#include <iostream>

#include "doctor_command.hpp"
#include "maf_sandbox/runtime/host/host_checks.hpp"

namespace maf_sandbox::cli {

void add_doctor_command(CLI::App& app, Context& context) {
    auto* command = app.add_subcommand(
        "doctor",
        "Check what this host offers the local backend (kernel, user namespaces, cgroups, ids, "
        "overlayfs, seccomp, slirp4netns, the supervisor and the image store), as root or "
        "rootless. Prints OK, LIMITED or MISSING for each, with the fix; exits 0 when the local "
        "backend can start, 1 when it cannot.");
    command->callback([&context] {
        const auto checks = runtime::run_host_checks();
        std::cout << runtime::format_host_checks(checks);
        const bool can_start = runtime::local_backend_can_start(checks);
        std::cout << (can_start ? "the local backend can start here\n"
                                : "the local backend cannot start here: fix what is MISSING\n");
        context.exit_code = can_start ? kExitOk : kExitNo;
    });
}

}  // namespace maf_sandbox::cli
