#include "session_resources.hpp"

#include <fmt/format.h>

#include <boost/json/array.hpp>

#include "maf_sandbox/core/file_transfer.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox::mcp::detail {
namespace {

namespace json = boost::json;

// RFC 3986 unreserved characters and `/` pass; every other byte is percent-encoded, so a URI is
// one token whatever the program named its file.
std::string escape_path(std::string_view name) {
    std::string escaped;
    for (const char c : name) {
        const auto byte = static_cast<unsigned char>(c);
        const bool plain = (byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') ||
                           (byte >= '0' && byte <= '9') || c == '-' || c == '.' || c == '_' ||
                           c == '~' || c == '/';
        escaped += plain ? std::string(1, c) : fmt::format("%{:02X}", byte);
    }
    return escaped;
}

bool is_text(const SessionResource& resource) {
    const auto& type = resource.mime_type;
    const bool textual =
        type.rfind("text/", 0) == 0 || type == "application/json" || type == "image/svg+xml";
    return textual && is_valid_utf8(resource.content);
}

}  // namespace

std::optional<std::string> SessionResources::add(std::string name, std::string mime_type,
                                                 std::string content) {
    if (content.size() > max_bytes_) {
        return std::nullopt;
    }
    while (!kept_.empty() && bytes_ + content.size() > max_bytes_) {
        bytes_ -= kept_.front().content.size();
        kept_.pop_front();
    }
    auto uri = fmt::format("{}://output/{}/{}", kResourceScheme, random_hex(16), escape_path(name));
    bytes_ += content.size();
    kept_.push_back(
        SessionResource{uri, std::move(name), std::move(mime_type), std::move(content)});
    return uri;
}

json::object SessionResources::list() const {
    json::array resources;
    for (const auto& resource : kept_) {
        resources.push_back(json::object{{"uri", resource.uri},
                                         {"name", resource.name},
                                         {"mimeType", resource.mime_type},
                                         {"size", resource.content.size()}});
    }
    return json::object{{"resources", std::move(resources)}};
}

const SessionResource* SessionResources::find(std::string_view uri) const {
    for (const auto& resource : kept_) {
        if (resource.uri == uri) {
            return &resource;
        }
    }
    return nullptr;
}

json::object SessionResources::read_result(const SessionResource& resource) {
    json::object item{{"uri", resource.uri}, {"mimeType", resource.mime_type}};
    if (is_text(resource)) {
        item["text"] = resource.content;
    } else {
        item["blob"] = base64_encode(resource.content);
    }
    return json::object{{"contents", json::array{std::move(item)}}};
}

}  // namespace maf_sandbox::mcp::detail
