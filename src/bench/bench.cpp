// The bench's entry point (maf_sandbox/bench/bench.hpp).
#include "maf_sandbox/bench/bench.hpp"

#include "local_bench.hpp"

namespace maf_sandbox::bench {

boost::json::object run_bench(const BenchOptions& options, std::shared_ptr<spdlog::logger> log) {
    LocalBench bench(plan_for(options.quick), options.only, std::move(log));
    return bench.run();
}

}  // namespace maf_sandbox::bench
