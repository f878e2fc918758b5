// Internal: the faults an operator or a test injects into the data plane (FaultOptions), the
// admin document that reads and replaces them (GET/PUT /admin/faults), and the wrapper that
// applies them around the data-plane handler: added latency, a 403 window, 429 and 503 answers,
// and connections dropped mid-response.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "http_face.hpp"
#include "maf_sandbox/emulator/emulator.hpp"

namespace maf_sandbox::emulator {

class FaultInjector {
  public:
    explicit FaultInjector(FaultOptions faults);

    // The faults that apply to one data-plane request, and how many such requests came since the
    // faults were last replaced (this one included; 0 when they do not apply to it).
    struct Applicable {
        FaultOptions faults;
        std::chrono::steady_clock::time_point since;
        std::uint64_t n = 0;
    };
    // Empty faults for an operation `only` does not name.
    Applicable begin(const std::string& method, const std::vector<std::string>& rest);
    // A uniform draw in [0, 1) from the seeded generator.
    double chance();
    std::uint64_t create_delay_ms();

    // The active faults as the admin document ({"rate429": ..., "only": ...}).
    boost::json::object document();
    // Replaces the faults with `body` (absent keys are off) and restarts the counters; refuses
    // 400 InvalidFault for an unknown key or an out-of-range value. Answers the new document.
    boost::json::object replace(const boost::json::object& body);

    // "PUT /sandboxes", "POST /sandboxes/{id}/executeShellCommand": what --fault-only names.
    static std::string operation_key(const std::string& method,
                                     const std::vector<std::string>& rest);

  private:
    std::mutex mutex_;  // faults_, epoch_, requests_ and random_
    FaultOptions faults_;
    std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
    std::uint64_t requests_ = 0;
    std::mt19937_64 random_;
};

// Applies the injector's faults to data-plane exchanges before `inner` sees them; other
// exchanges pass through untouched.
Handler with_faults(Handler inner, std::shared_ptr<FaultInjector> injector,
                    boost::asio::any_io_executor executor);

}  // namespace maf_sandbox::emulator
