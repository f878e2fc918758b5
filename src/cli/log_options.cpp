// -v, --log-level and MAF_SANDBOX_LOG for the full command line.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>

#include "cli.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/log_level.hpp"

namespace maf_sandbox::cli {
namespace {

void use_level(Context& context, spdlog::level::level_enum level) {
    context.log->set_level(level);
    spdlog::set_level(level);  // loggers the libraries make for themselves follow it
    context.log_level_chosen = true;
}

}  // namespace

void add_log_options(CLI::App& app, Context& context) {
    if (const auto from_environment = log_level_from_environment()) {
        use_level(context, *from_environment);
    }
    app.add_flag_function(
           "-v,--verbose",
           [&context](std::int64_t count) {
               const auto level = count >= 3   ? spdlog::level::trace
                                  : count == 2 ? spdlog::level::debug
                                               : spdlog::level::info;
               use_level(context, level);
           },
           "More detail on stderr: -v info, -vv debug, -vvv trace (also after the command)")
        ->group("Logging");
    app.add_option_function<std::string>(
           "--log-level",
           [&context](const std::string& name) {
               try {
                   use_level(context, parse_log_level(name));
               } catch (const InvalidArgument& e) {
                   throw CLI::ValidationError("--log-level", e.what());
               }
           },
           "trace, debug, info, warn, error or off (default warn; MAF_SANDBOX_LOG when not given)")
        ->group("Logging");
    // Commands hand options they do not know to this one, so -v works after the command too.
    app.fallthrough();
}

}  // namespace maf_sandbox::cli
