// The `acas_` scenarios of `maf-sandbox bench`: the bench's operations through an
// acas-emulator and AcasBackend, each sample interleaved with the same operation on the bench's
// local backend, with the HTTP requests each operation costs.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/logger.h>
#include <boost/json.hpp>

#include "maf_sandbox/local/local_backend.hpp"

namespace maf_sandbox::bench {

// One scenario's samples (ms), ours through the emulator and the local baseline, for the bench to
// summarise as it does every scenario; `extra` goes into its JSON object as is
// (`requests_per_op`, and `bytes` for files).
struct AcasScenario {
    std::string name;
    std::string baseline;
    std::vector<double> ours;
    std::vector<double> base;
    boost::json::object extra;
};

struct AcasBenchOptions {
    bool quick = true;
    // Whether a scenario name was asked for (the bench's --only rule).
    std::function<bool(std::string_view)> wanted;
    // The --only values: acas_file_write_read_32MiB runs in a quick plan only when named in full.
    std::vector<std::string> only;
};

// Starts `acas-emulator` from next to this executable (127.0.0.1, port 0, self-signed, a token,
// its own temporary state directory), measures each wanted scenario against `local` and hands it
// to `add`. When the emulator is missing or does not start, logs a warning and adds nothing.
// The emulator, its sandboxes and its state directory are gone when this returns or throws.
void acas_scenarios(local::LocalBackend& local, const AcasBenchOptions& options,
                    const std::function<void(AcasScenario)>& add, spdlog::logger& log);

}  // namespace maf_sandbox::bench
