#include "polling.hpp"

#include <thread>

namespace maf_sandbox::testing {

bool poll_until(const std::function<bool()>& condition, std::chrono::milliseconds limit,
                std::chrono::milliseconds step) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (condition()) {
            return true;
        }
        std::this_thread::sleep_for(step);
    }
    return condition();
}

}  // namespace maf_sandbox::testing
