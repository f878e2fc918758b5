#include "egress_http.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "egress_host_names.hpp"

namespace maf_sandbox::runtime {
namespace {

constexpr std::string_view kCrlf = "\r\n";

bool is_tchar(char c) {
    static constexpr std::string_view kSymbols = "!#$%&'*+-.^_`|~";
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           kSymbols.find(c) != std::string_view::npos;
}

bool is_token(std::string_view text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), is_tchar);
}

// Field values: visible ASCII, space, tab and obs-text; never a control character.
bool is_field_value(std::string_view text) {
    return std::all_of(text.begin(), text.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u == '\t' || (u >= 0x20 && u != 0x7f);
    });
}

bool is_target_char(char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7f;
}

std::string_view trim(std::string_view text) {
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string_view::npos) {
        return {};
    }
    return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// Splits `head` into CRLF-terminated lines; refuses a bare CR or LF inside a line.
std::vector<std::string_view> split_lines(std::string_view head) {
    std::vector<std::string_view> lines;
    while (!head.empty()) {
        const auto end = head.find(kCrlf);
        if (end == std::string_view::npos) {
            throw EgressRefusal{"malformed request head"};
        }
        const auto line = head.substr(0, end);
        if (line.find_first_of("\r\n") != std::string_view::npos) {
            throw EgressRefusal{"malformed request head"};
        }
        lines.push_back(line);
        head.remove_prefix(end + kCrlf.size());
    }
    return lines;
}

HttpField parse_field(std::string_view line) {
    if (line.empty() || line.front() == ' ' || line.front() == '\t') {
        throw EgressRefusal{"malformed header field"};  // obs-fold or an empty line mid-head
    }
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
        throw EgressRefusal{"malformed header field"};
    }
    const auto value = trim(line.substr(colon + 1));
    if (!is_field_value(value)) {
        throw EgressRefusal{"malformed header field"};
    }
    return {std::string(line.substr(0, colon)), std::string(value)};
}

// Fields a proxy consumes rather than forwards (RFC 9110 7.6.1, plus the proxy-only ones).
constexpr std::array<std::string_view, 9> kHopByHop{
    "connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate",
    "te",         "trailer",    "upgrade",          "transfer-encoding"};

std::vector<std::string> connection_tokens(const std::vector<HttpField>& fields) {
    std::vector<std::string> tokens;
    for (const auto& field : fields) {
        if (!iequals(field.name, "connection") && !iequals(field.name, "proxy-connection")) {
            continue;
        }
        std::string_view rest = field.value;
        while (!rest.empty()) {
            const auto comma = rest.find(',');
            const auto token = trim(rest.substr(0, comma));
            if (!token.empty()) {
                tokens.push_back(ascii_lower(token));
            }
            rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
        }
    }
    return tokens;
}

bool is_dropped(std::string_view name, const std::vector<std::string>& named) {
    const auto lower = ascii_lower(name);
    return std::find(kHopByHop.begin(), kHopByHop.end(), lower) != kHopByHop.end() ||
           std::find(named.begin(), named.end(), lower) != named.end();
}

}  // namespace

RequestHead parse_request_head(std::string_view head) {
    const auto lines = split_lines(head);
    if (lines.size() < 2 || !lines.back().empty()) {
        throw EgressRefusal{"malformed request head"};
    }
    const auto request_line = lines.front();
    const auto first_space = request_line.find(' ');
    const auto last_space = request_line.rfind(' ');
    if (first_space == std::string_view::npos || first_space == last_space) {
        throw EgressRefusal{"malformed request line"};
    }
    RequestHead request;
    request.method = request_line.substr(0, first_space);
    request.target = request_line.substr(first_space + 1, last_space - first_space - 1);
    const auto version = request_line.substr(last_space + 1);
    if (!is_token(request.method) || request.target.empty() ||
        !std::all_of(request.target.begin(), request.target.end(), is_target_char)) {
        throw EgressRefusal{"malformed request line"};
    }
    if (version == "HTTP/1.1") {
        request.minor_version = 1;
    } else if (version == "HTTP/1.0") {
        request.minor_version = 0;
    } else {
        throw EgressRefusal{"unsupported http version"};
    }
    for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
        request.fields.push_back(parse_field(lines[i]));
    }
    return request;
}

Authority parse_authority(std::string_view text, std::optional<std::uint16_t> default_port) {
    if (text.empty() || text.find('@') != std::string_view::npos) {
        throw EgressRefusal{"malformed authority"};
    }
    Authority authority;
    std::string_view host;
    std::string_view port_text;
    bool has_port = false;
    if (text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string_view::npos) {
            throw EgressRefusal{"malformed authority"};
        }
        host = text.substr(0, close + 1);
        const auto rest = text.substr(close + 1);
        if (!rest.empty()) {
            if (rest.front() != ':') {
                throw EgressRefusal{"malformed authority"};
            }
            has_port = true;
            port_text = rest.substr(1);
        }
    } else {
        const auto colon = text.rfind(':');
        if (colon != std::string_view::npos && text.find(':') != colon) {
            throw EgressRefusal{"malformed authority"};  // an unbracketed IPv6 literal
        }
        host = text.substr(0, colon);
        if (colon != std::string_view::npos) {
            has_port = true;
            port_text = text.substr(colon + 1);
        }
    }
    if (has_port) {
        const auto port = parse_port(port_text);
        if (!port) {
            throw EgressRefusal{"malformed port"};
        }
        authority.port = *port;
    } else if (default_port) {
        authority.port = *default_port;
    } else {
        throw EgressRefusal{"connect target has no port"};
    }
    if (is_ip_literal(host)) {
        authority.host = ascii_lower(host);
        authority.ip_literal = true;
        return authority;
    }
    auto name = normalize_host_name(host);
    if (!name) {
        throw EgressRefusal{"malformed host name"};
    }
    authority.host = std::move(*name);
    return authority;
}

AbsoluteTarget parse_absolute_target(std::string_view target) {
    constexpr std::string_view kHttp = "http://";
    if (target.size() < kHttp.size() || !iequals(target.substr(0, kHttp.size()), kHttp)) {
        if (target.starts_with("/")) {
            throw EgressRefusal{"not a proxy request"};
        }
        throw EgressRefusal{"only http:// urls are forwarded, use CONNECT for https"};
    }
    target.remove_prefix(kHttp.size());
    if (target.find('#') != std::string_view::npos) {
        throw EgressRefusal{"malformed request target"};
    }
    const auto end = target.find_first_of("/?");
    AbsoluteTarget result;
    result.authority = parse_authority(target.substr(0, end), std::uint16_t{80});
    if (end == std::string_view::npos) {
        result.path = "/";
    } else if (target[end] == '?') {
        result.path = "/" + std::string(target.substr(end));
    } else {
        result.path = target.substr(end);
    }
    return result;
}

BodyFraming body_framing(const RequestHead& head) {
    BodyFraming framing;
    std::optional<std::string> length;
    int transfer_encodings = 0;
    for (const auto& field : head.fields) {
        if (iequals(field.name, "transfer-encoding")) {
            ++transfer_encodings;
            if (!iequals(field.value, "chunked") || head.minor_version == 0) {
                throw EgressRefusal{"unsupported transfer-encoding"};
            }
            framing.chunked = true;
        } else if (iequals(field.name, "content-length")) {
            if (length && *length != field.value) {
                throw EgressRefusal{"conflicting content-length"};
            }
            length = field.value;
        }
    }
    if (transfer_encodings > 1 || (framing.chunked && length)) {
        throw EgressRefusal{"ambiguous body framing"};
    }
    if (length) {
        if (length->empty() || length->size() > 18 ||
            !std::all_of(length->begin(), length->end(),
                         [](char c) { return c >= '0' && c <= '9'; })) {
            throw EgressRefusal{"malformed content-length"};
        }
        framing.content_length = std::stoull(*length);
    }
    return framing;
}

std::string upstream_request_head(const RequestHead& head, const std::string& path,
                                  std::string_view host_field, const BodyFraming& framing) {
    const auto named = connection_tokens(head.fields);
    std::string out = fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\n", head.method, path, host_field);
    for (const auto& field : head.fields) {
        if (iequals(field.name, "host") || is_dropped(field.name, named)) {
            continue;
        }
        out += field.name;
        out += ": ";
        out += field.value;
        out += kCrlf;
    }
    if (framing.chunked) {
        out += "Transfer-Encoding: chunked\r\n";
    }
    out += "Connection: close\r\n\r\n";
    return out;
}

std::string guest_response_head(std::string_view head) {
    std::vector<std::string_view> lines;
    try {
        lines = split_lines(head);
    } catch (const EgressRefusal&) {
        throw EgressRefusal{"malformed upstream response"};
    }
    if (lines.size() < 2 || !lines.back().empty() || !lines.front().starts_with("HTTP/1.")) {
        throw EgressRefusal{"malformed upstream response"};
    }
    std::vector<HttpField> fields;
    for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
        try {
            fields.push_back(parse_field(lines[i]));
        } catch (const EgressRefusal&) {
            throw EgressRefusal{"malformed upstream response"};
        }
    }
    const auto named = connection_tokens(fields);
    std::string out(lines.front());
    out += kCrlf;
    for (const auto& field : fields) {
        // Transfer-Encoding stays: the body is relayed exactly as the upstream framed it.
        if (!iequals(field.name, "transfer-encoding") && is_dropped(field.name, named)) {
            continue;
        }
        out += field.name;
        out += ": ";
        out += field.value;
        out += kCrlf;
    }
    out += "Connection: close\r\n\r\n";
    return out;
}

std::string forbidden_response(std::string_view reason) {
    const auto body = fmt::format("maf-sandbox egress proxy refused this request: {}\n", reason);
    return fmt::format(
        "HTTP/1.1 403 Forbidden\r\nx-deny-reason: {}\r\nContent-Type: text/plain\r\n"
        "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
        reason, body.size(), body);
}

std::string gateway_failure_response(int status, std::string_view phrase, std::string_view why) {
    const auto body = fmt::format("maf-sandbox egress proxy: {}\n", why);
    return fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n"
        "Connection: close\r\n\r\n{}",
        status, phrase, body.size(), body);
}

}  // namespace maf_sandbox::runtime
