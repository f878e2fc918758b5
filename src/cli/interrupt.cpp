#include "interrupt.hpp"

#include <csignal>
#include <cstring>

#include <fmt/format.h>

namespace maf_sandbox::cli {

Interrupted::Interrupted(int signal)
    : std::runtime_error(
          fmt::format("interrupted by {}", ::sigabbrev_np(signal) != nullptr
                                               ? fmt::format("SIG{}", ::sigabbrev_np(signal))
                                               : std::to_string(signal))),
      signal_(signal) {}

InterruptWatch::InterruptWatch(boost::asio::io_context& io) : signals_(io, SIGINT, SIGTERM) {}

}  // namespace maf_sandbox::cli
