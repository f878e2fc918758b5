// Internal: the file plane's write bodies are counted against its in-flight byte budget before
// the server reads them. The server reads a whole request body into memory before any handler
// runs, so a budget first taken in the handler would let N parallel writes of the largest body
// the server accepts sit in memory at once, uncounted.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "byte_budget.hpp"
#include "maf_sandbox/net/http_server.hpp"

namespace maf_sandbox::emulator {

// For the server's HttpServerOptions::admit_body. A file write (and only that route) is admitted
// once its bearer token is right and the length its Content-Length declares has been taken from
// `budget` (waiting up to a second, as the budget does, then 429 with Retry-After); the hold goes
// with the request (HttpRequest::admission) until the write is done. A wrong token is refused 401
// and a chunked write 411, both before any of the body is read.
net::BodyAdmitter file_write_admission(std::optional<std::string> token,
                                       std::shared_ptr<ByteBudget> budget);

}  // namespace maf_sandbox::emulator
