// Runs one host program with a deadline (the Azure CLI credential's `az`): stdin is /dev/null,
// stdout and stderr are captured up to a bound, and an overrun kills the child.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <string>
#include <vector>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox::azure::detail {

struct ProgramOutput {
    int exit_code = -1;  // 128 + N for a signal
    std::string out;
    std::string err;
};

// Throws SystemError when the program cannot be started and Timeout when it overran (it is
// killed and reaped first). Output beyond max_output per stream is dropped.
Task<ProgramOutput> run_program(boost::asio::any_io_executor executor, std::string program,
                                std::vector<std::string> arguments, Seconds timeout,
                                std::size_t max_output = 1024 * 1024);

// `name` itself when it holds a slash, else the first executable `dir/name` on `path`
// (colon-separated); empty when there is none.
std::string find_on_path(const std::string& name, const std::string& path);

}  // namespace maf_sandbox::azure::detail
