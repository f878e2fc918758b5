#include "event_stream.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace maf_sandbox::mcp::detail {
namespace {

std::string_view trim(std::string_view text) {
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string_view::npos) {
        return {};
    }
    const auto last = text.find_last_not_of(" \t");
    return text.substr(first, last - first + 1);
}

std::string lower(std::string_view text) {
    std::string out(text);
    for (auto& c : out) {
        if (c >= 'A' && c <= 'Z') {
            c = static_cast<char>(c - 'A' + 'a');
        }
    }
    return out;
}

// A media range's q parameter of zero ("q=0", "q=0.0", "q=0.000") refuses that range.
bool refused(std::string_view parameters) {
    std::size_t at = 0;
    while (at < parameters.size()) {
        auto end = parameters.find(';', at);
        if (end == std::string_view::npos) {
            end = parameters.size();
        }
        const auto parameter = lower(trim(parameters.substr(at, end - at)));
        if (parameter.rfind("q=", 0) == 0) {
            const auto value = std::string_view(parameter).substr(2);
            return !value.empty() && value.find_first_not_of("0.") == std::string_view::npos;
        }
        at = end + 1;
    }
    return false;
}

}  // namespace

bool accepts_event_stream(const std::optional<std::string>& accept) {
    if (!accept) {
        return false;
    }
    std::string_view rest(*accept);
    while (!rest.empty()) {
        auto comma = rest.find(',');
        const auto range = rest.substr(0, comma);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        const auto semicolon = range.find(';');
        const auto type = lower(trim(range.substr(0, semicolon)));
        const auto parameters =
            semicolon == std::string_view::npos ? std::string_view() : range.substr(semicolon + 1);
        if ((type == "text/event-stream" || type == "text/*" || type == "*/*") &&
            !refused(parameters)) {
            return true;
        }
    }
    return false;
}

EventStream::EventStream(boost::asio::any_io_executor executor, std::size_t max_held_bytes)
    : wake_(std::move(executor), boost::asio::steady_timer::time_point::max()),
      max_held_bytes_(max_held_bytes) {}

boost::asio::awaitable<std::string_view> EventStream::next() {
    while (events_.empty() && !finished_) {
        wake_.expires_at(boost::asio::steady_timer::time_point::max());
        co_await wake_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    if (events_.empty()) {
        co_return std::string_view();
    }
    current_ = std::move(events_.front());
    events_.pop_front();
    held_bytes_ -= current_.size();
    co_return std::string_view(current_);
}

void EventStream::notify(std::string message) {
    if (finished_ || held_bytes_ + message.size() > max_held_bytes_) {
        return;
    }
    push(std::move(message));
}

void EventStream::respond(std::string message) {
    if (finished_) {
        return;
    }
    push(std::move(message));
    finished_ = true;
}

void EventStream::push(std::string message) {
    // Serialized JSON holds no raw newline, so one data line carries the whole message.
    std::string event = "event: message\ndata: ";
    event.append(message);
    event.append("\n\n");
    held_bytes_ += event.size();
    events_.push_back(std::move(event));
    wake_.cancel();
}

}  // namespace maf_sandbox::mcp::detail
