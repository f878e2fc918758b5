#include "maf_sandbox/net/http.hpp"

#include <fmt/format.h>
#include <boost/asio/ip/address.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>
#include <cctype>
#include <charconv>

namespace maf_sandbox::net {

bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(a[i])) !=
            std::tolower(static_cast<unsigned char>(b[i]))) {
            return false;
        }
    }
    return true;
}

void HttpHeaders::add(std::string name, std::string value) {
    fields_.emplace_back(std::move(name), std::move(value));
}

void HttpHeaders::set(std::string name, std::string value) {
    remove(name);
    add(std::move(name), std::move(value));
}

void HttpHeaders::remove(std::string_view name) {
    std::erase_if(fields_, [&](const Field& f) { return iequals(f.first, name); });
}

std::optional<std::string> HttpHeaders::get(std::string_view name) const {
    for (const auto& [key, value] : fields_) {
        if (iequals(key, name)) {
            return value;
        }
    }
    return std::nullopt;
}

std::string ParsedUrl::authority() const {
    if (host.find(':') != std::string::npos) {
        return fmt::format("[{}]:{}", host, port);
    }
    return fmt::format("{}:{}", host, port);
}

ParsedUrl parse_http_url(std::string_view url) {
    auto parsed = boost::urls::parse_uri(url);
    if (!parsed) {
        throw InvalidArgument(
            fmt::format("'{}' is not an absolute URL; pass one like https://host:port/path", url));
    }
    const boost::urls::url_view view = *parsed;
    ParsedUrl out;
    for (char c : view.scheme()) {
        out.scheme.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    if (out.scheme != "http" && out.scheme != "https") {
        throw InvalidArgument(
            fmt::format("URL scheme '{}' is not supported; use http or https", out.scheme));
    }
    if (view.has_userinfo()) {
        throw InvalidArgument(
            "URLs with user information are refused; pass credentials as headers");
    }
    if (view.host_type() == boost::urls::host_type::ipv6) {
        out.host = std::string(view.host_address());
    } else {
        out.host = std::string(view.encoded_host());
    }
    if (out.host.empty()) {
        throw InvalidArgument(fmt::format("URL '{}' has no host", url));
    }
    if (view.has_port()) {
        const auto text = view.port();
        unsigned value = 0;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec != std::errc{} || ptr != text.data() + text.size() || value == 0 || value > 65535) {
            throw InvalidArgument(fmt::format("URL '{}' has an invalid port", url));
        }
        out.port = static_cast<std::uint16_t>(value);
    } else {
        out.port = out.is_https() ? 443 : 80;
    }
    const auto path = view.encoded_path();
    const auto query = view.encoded_query();
    out.target.reserve(path.size() + query.size() + 2);
    if (path.empty()) {
        out.target.push_back('/');
    }
    out.target.append(path.data(), path.size());
    if (view.has_query()) {
        out.target.push_back('?');
        out.target.append(query.data(), query.size());
    }
    return out;
}

std::string percent_encode(std::string_view text, bool keep_slash) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : text) {
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            out.push_back(static_cast<char>(c));
        } else {
            out.push_back('%');
            out.push_back(kHex[c >> 4]);
            out.push_back(kHex[c & 0x0f]);
        }
    }
    return out;
}

bool is_loopback_host(std::string_view host) noexcept {
    if (iequals(host, "localhost")) {
        return true;
    }
    boost::system::error_code ec;
    const auto address = boost::asio::ip::make_address(std::string(host), ec);
    return !ec && address.is_loopback();
}

}  // namespace maf_sandbox::net
