// `maf-sandbox bench [--quick] [--json FILE] [--only PREFIX]...`: the flags of the bench harness
// (src/bench), which does the measuring; this file only parses them and writes the JSON file.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "cli.hpp"
#include "maf_sandbox/bench/bench.hpp"
#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::cli {

void add_bench_command(CLI::App& app, Context& context) {
    struct Options {
        bench::BenchOptions bench;
        std::string json_file;
    };
    auto options = std::make_shared<Options>();
    auto* command = app.add_subcommand(
        "bench", "Measure the local backend next to posix_spawn, bwrap and unshare in one run");
    command->add_flag("--quick", options->bench.quick, "A short run (under a minute), for CI");
    command->add_option("--json", options->json_file, "Also write every figure to FILE as JSON");
    command->add_option("--only", options->bench.only,
                        "Run only the scenarios whose names start with this (repeatable)");
    command->callback([options, &context] {
        const boost::json::object result = bench::run_bench(options->bench, context.log);
        if (!options->json_file.empty()) {
            std::ofstream out(options->json_file, std::ios::trunc);
            out << boost::json::serialize(result) << "\n";
            out.close();  // a write the buffer held until now fails here, not unseen at exit
            if (!out) {
                throw SystemError(errno, fmt::format("writing {}", options->json_file));
            }
        }
    });
}

}  // namespace maf_sandbox::cli
