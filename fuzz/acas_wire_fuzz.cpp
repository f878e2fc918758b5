// What the ACAS backend reads from the service (src/acas/wire.hpp) on arbitrary bytes: sandboxes,
// exec answers, disk images, listings (with nextLink) and file entries.
//
// Properties, beyond not crashing: a malformed answer is refused with the ACAS errors
// (AcasServiceError, or AcasEntryPayloadIncomplete for a file entry), never anything else; a file
// entry is a link exactly when isSymlink is true, and only a regular file carries a size; a
// nextLink is followed only when an independent reading of its authority names the same host and
// port over https.
#include <fuzzer/FuzzedDataProvider.h>

#include <boost/json/parse.hpp>
#include <boost/url/parse.hpp>
#include <charconv>
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/net/http.hpp"
#include "wire.hpp"

namespace maf_sandbox::acas {
namespace {

namespace json = boost::json;
using fuzz::require;

struct Endpoint {
    const char* host;
    std::uint16_t port;
};
constexpr Endpoint kEndpoints[] = {
    {"management.local.azuredevcompute.io", 443}, {"127.0.0.1", 8443}, {"::1", 443}};

bool iequal(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

// Our own reading of an accepted link: "https://" then host[:port] up to the path.
bool names_endpoint(std::string_view link, const Endpoint& endpoint) {
    if (link.size() < 8 || !iequal(link.substr(0, 8), "https://")) {
        return false;
    }
    auto authority = link.substr(8);
    authority = authority.substr(0, authority.find_first_of("/?#"));
    std::string_view host = authority;
    std::string_view port;
    if (authority.starts_with('[')) {
        const auto close = authority.find(']');
        if (close == std::string_view::npos) {
            return false;
        }
        host = authority.substr(1, close - 1);
        const auto tail = authority.substr(close + 1);
        if (!tail.empty()) {
            if (!tail.starts_with(':')) {
                return false;
            }
            port = tail.substr(1);
        }
    } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
        host = authority.substr(0, colon);
        port = authority.substr(colon + 1);
    }
    unsigned value = 443;
    if (!port.empty()) {
        const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
        if (ec != std::errc{} || end != port.data() + port.size()) {
            return false;
        }
    }
    return iequal(host, endpoint.host) && value == endpoint.port;
}

// Boost.URL 1.81 accepts an authority followed by something other than '/', '?' or '#' and reads
// the rest as a path without its leading '/' ("https://h:443x/p" is host h, port 443, path "x/p").
bool boost_rootless_path_quirk(std::string_view link) {
    const auto parsed = boost::urls::parse_uri(link);
    return parsed && !parsed->encoded_path().empty() && !parsed->encoded_path().starts_with('/');
}

void check_link(std::string_view link, const Endpoint& endpoint) {
    try {
        wire::require_same_origin(link, endpoint.host, endpoint.port);
    } catch (const AcasServiceError&) {
        return;
    }
    if (boost_rootless_path_quirk(link)) {
        // The request still goes to the endpoint's host and port (with a malformed target), so
        // only that is required here; net::parse_http_url should refuse such links.
        const auto parsed = net::parse_http_url(link);
        require(
            parsed.is_https() && iequal(parsed.host, endpoint.host) && parsed.port == endpoint.port,
            "a followed nextLink goes to the same https endpoint", std::string(link));
        return;
    }
    require(names_endpoint(link, endpoint), "a followed nextLink names the same https endpoint",
            std::string(link) + " for " + endpoint.host);
}

template <typename Parse>
void refused_only_as_acas(Parse parse) {
    try {
        parse();
    } catch (const AcasServiceError&) {
    }
}

void check_document(const json::value& document, const Endpoint& endpoint) {
    refused_only_as_acas([&] { wire::parse_sandbox(document); });
    refused_only_as_acas([&] { wire::parse_exec_answer(document); });
    refused_only_as_acas([&] { wire::parse_disk_image(document); });
    refused_only_as_acas([&] {
        const auto page = wire::parse_page(document);
        for (const auto& item : page.items) {
            refused_only_as_acas([&] { wire::parse_sandbox(item); });
        }
        if (!page.next_link.empty()) {
            check_link(page.next_link, endpoint);
        }
    });
    try {
        const auto entry = wire::parse_entry(document);
        const auto& object = document.as_object();
        const bool link = object.at("isSymlink").as_bool();
        const bool dir = object.at("isDir").as_bool();
        require((entry.kind == EntryKind::symlink) == link, "a link is named by isSymlink alone");
        require(link || (entry.kind == EntryKind::directory) == dir, "a directory is isDir");
        require(!entry.size || entry.kind == EntryKind::file, "only a regular file has a size");
    } catch (const AcasEntryPayloadIncomplete&) {
    }
}

}  // namespace
}  // namespace maf_sandbox::acas

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider input(data, size);
    const auto& endpoint = maf_sandbox::acas::kEndpoints[input.ConsumeIntegralInRange<int>(0, 2)];
    const auto text = input.ConsumeRemainingBytesAsString();
    maf_sandbox::acas::check_link(text, endpoint);
    boost::system::error_code ec;
    const auto document = boost::json::parse(text, ec);
    if (!ec) {
        maf_sandbox::acas::check_document(document, endpoint);
    }
    return 0;
}
