// One POST of the streamable HTTP transport answered as server-sent events (private to src/mcp):
// the request's notifications as they happen, then its JSON-RPC response, then the end of the
// body. The HTTP server pulls the events; the call that produces them holds only a weak reference,
// so a client that went away leaves nothing growing.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "maf_sandbox/net/http.hpp"

namespace maf_sandbox::mcp::detail {

// Whether an Accept header lists text/event-stream (or text/*, or */*) without q=0.
bool accepts_event_stream(const std::optional<std::string>& accept);

// The response that carries it sets `Transfer-Encoding: chunked`, which makes the HTTP server
// send each event as one chunk as soon as it is there (size() is then ignored).
class EventStream : public net::BodyStream {
  public:
    // Notifications beyond `max_held_bytes` not yet taken by the client are dropped (a client
    // that reads slowly loses progress, never the response).
    EventStream(boost::asio::any_io_executor executor, std::size_t max_held_bytes);

    std::uint64_t size() const override { return 0; }
    boost::asio::awaitable<std::string_view> next() override;

    // A notification, as one `message` event.
    void notify(std::string message);
    // The response, as the last event; the body ends after it. Later calls are ignored.
    void respond(std::string message);

  private:
    void push(std::string message);

    boost::asio::steady_timer wake_;
    std::size_t max_held_bytes_;
    std::size_t held_bytes_ = 0;
    std::deque<std::string> events_;
    std::string current_;
    bool finished_ = false;
};

}  // namespace maf_sandbox::mcp::detail
