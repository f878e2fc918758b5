// Internal: the shape of the emulator's HTTP face. A request is routed once (routing.hpp) into an
// Exchange; a Handler answers an Exchange; the wrappers (metrics, which also stamps every answer
// with the emulator's identity, faults, refusals) each take a Handler and return one that does
// their one job around it, Beast-style, so no route knows about faults, metrics or how a refusal
// is spelled on the wire.
#pragma once

#include <functional>
#include <string>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/net/http_server.hpp"
#include "routing.hpp"

namespace maf_sandbox::emulator {

struct Exchange {
    net::HttpRequest request;
    Route route;             // routing.hpp's decision for request.method and request.target
    std::string request_id;  // the client's x-ms-client-request-id, or one the emulator minted
};

// Answers the exchange; the exchange outlives the returned task.
using Handler = std::function<Task<net::HttpResponse>(const Exchange&)>;

}  // namespace maf_sandbox::emulator
