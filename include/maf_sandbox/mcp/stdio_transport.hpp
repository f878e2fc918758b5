// The MCP stdio transport: one session, newline-delimited JSON-RPC messages on stdin and stdout
// (stderr stays free for the log).
#pragma once

#include <cstddef>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/mcp/server.hpp"

namespace maf_sandbox::mcp {

struct StdioOptions {
    int input_fd = 0;
    int output_fd = 1;
    // Ends the session on SIGTERM or SIGINT too (not only on end of input).
    bool handle_signals = true;
    // The longest message line read (the HTTP transport's body bound): a longer line is answered
    // with a JSON-RPC parse error (id null) and dropped unread, so memory stays bounded.
    std::size_t max_message_bytes = 64 * kMiB;
};

// Serves one session until the input ends (EOF) or, with handle_signals, SIGTERM/SIGINT arrives;
// then closes the session, which cancels calls in flight and disposes the session's sandboxes
// within the server's close_timeout, and returns. Messages are handled concurrently, so a
// notifications/cancelled can reach a running tools/call. Throws SystemError when the input
// cannot be read at all.
Task<void> serve_stdio(McpServer& server, StdioOptions options = {});

}  // namespace maf_sandbox::mcp
