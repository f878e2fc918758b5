// Internal: conversions between our plain messages and Beast's, shared by client and server.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "maf_sandbox/net/http.hpp"

namespace maf_sandbox::net::detail {

template <bool IsRequest, typename Fields>
HttpHeaders headers_of(const boost::beast::http::header<IsRequest, Fields>& header) {
    HttpHeaders out;
    for (const auto& field : header) {
        out.add(std::string(field.name_string()), std::string(field.value()));
    }
    return out;
}

template <bool IsRequest, typename Fields>
void copy_headers(const HttpHeaders& from, boost::beast::http::header<IsRequest, Fields>& to) {
    for (const auto& [name, value] : from) {
        to.insert(name, value);
    }
}

}  // namespace maf_sandbox::net::detail
