// `maf-sandbox egress-log ID [--json]`: the egress proxy's decisions for one local sandbox.
#include <time.h>
#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <boost/json.hpp>
#include <chrono>
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "maf_sandbox/core/egress_audit.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"

namespace maf_sandbox::cli {

namespace {

struct EgressLogOptions {
    std::string id;
    bool json = false;
};

// RFC 3339 in UTC with milliseconds, as the decision log itself writes times.
std::string utc_time(std::chrono::system_clock::time_point time) {
    return egress_time_text(time);
}

}  // namespace

void add_egress_command(CLI::App& app, Context& context) {
    auto options = std::make_shared<EgressLogOptions>();
    auto* command = app.add_subcommand(
        "egress-log", "Show the egress proxy's decisions for a local sandbox (allowlist egress)");
    command->add_option("id", options->id, "Sandbox id (see `maf-sandbox ls`)")->required();
    command->add_flag("--json", options->json,
                      "A JSON array of {time, method, host, port, allowed, reason}");
    command->callback([options, &context] {
        local::LocalBackend backend;
        const auto decisions = backend.egress_decisions(options->id);
        if (options->json) {
            boost::json::array out;
            for (const auto& decision : decisions) {
                out.emplace_back(boost::json::object{{"time", utc_time(decision.time)},
                                                     {"method", decision.method},
                                                     {"host", decision.host},
                                                     {"port", decision.port},
                                                     {"allowed", decision.allowed},
                                                     {"reason", decision.reason}});
            }
            std::cout << boost::json::serialize(out) << "\n";
            return;
        }
        for (const auto& decision : decisions) {
            std::cout << fmt::format("{}  {:<5}  {} {}:{}{}\n", utc_time(decision.time),
                                     decision.allowed ? "allow" : "deny", decision.method,
                                     decision.host, decision.port,
                                     decision.reason.empty() ? "" : "  (" + decision.reason + ")");
        }
        if (decisions.empty()) {
            context.log->info("no egress decisions recorded for {}", options->id);
        }
    });
}

}  // namespace maf_sandbox::cli
