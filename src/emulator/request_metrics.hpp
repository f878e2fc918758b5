// Internal: what the emulator counts and logs per request, and the /metrics text. The wrapper
// times the handler it wraps, counts its answer by method, route and status (route names come
// from routing.hpp's fixed table, so the label set stays bounded whatever clients send), logs one
// line, and stamps every answer, a dropped one included, with the emulator's identity and the
// request id.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "http_face.hpp"
#include "sandbox_state.hpp"

namespace maf_sandbox::emulator {

class RequestMetrics {
  public:
    void count(std::string_view method, std::string_view route, int status, double seconds);
    // The Prometheus text exposition, with the sandbox gauge from `by_state`.
    std::string render(const std::map<SandboxState, int>& by_state);

  private:
    std::mutex mutex_;
    std::map<std::string, std::uint64_t> requests_;                    // label set -> count
    std::map<std::string, std::pair<double, std::uint64_t>> latency_;  // route -> (sum s, count)
};

// A bounded method label: any token other than the usual methods counts as "other".
std::string_view method_label(const std::string& method);

// Counts, logs and stamps (x-acas-emulator: `identity`, x-ms-request-id, x-ms-client-request-id)
// every answer of `inner`; an empty `identity` sends no x-acas-emulator header (the emulator
// impersonating the service).
Handler with_metrics(Handler inner, std::shared_ptr<RequestMetrics> metrics,
                     std::shared_ptr<spdlog::logger> logger, std::string identity);

}  // namespace maf_sandbox::emulator
