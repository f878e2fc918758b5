// The files one MCP session's calls handed back, served through resources/list and resources/read
// (private to src/mcp). Each gets a URI carrying a random token of its own, so a URI can only be
// known from the result that gave it, and it lives only as long as the session: the session's
// store dies with it. The store keeps at most a byte budget; past it the oldest files go first
// (their URIs then read as not found).
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace maf_sandbox::mcp::detail {

inline constexpr std::string_view kResourceScheme = "maf-sandbox";

struct SessionResource {
    std::string uri;
    std::string name;
    std::string mime_type;
    std::string content;
};

class SessionResources {
  public:
    explicit SessionResources(std::uint64_t max_bytes) : max_bytes_(max_bytes) {}

    // Keeps `content` and returns its URI, `maf-sandbox://output/<32 hex>/<name>`; nullopt when
    // the file alone is over the whole budget (it is then only landed, never served).
    std::optional<std::string> add(std::string name, std::string mime_type, std::string content);

    // The resources/list result: the files still kept, oldest first.
    boost::json::object list() const;

    const SessionResource* find(std::string_view uri) const;

    // The resources/read result for one kept file: text for text media types in UTF-8, base64
    // `blob` otherwise.
    static boost::json::object read_result(const SessionResource& resource);

  private:
    std::uint64_t max_bytes_;
    std::uint64_t bytes_ = 0;
    std::deque<SessionResource> kept_;
};

}  // namespace maf_sandbox::mcp::detail
