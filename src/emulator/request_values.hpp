// Internal: how the emulator reads the values clients send as text: CPU and memory quantities
// (checked by the create route, enforced by the launch), optional strings of a JSON body, and
// boolean query parameters, and the labels of a create body.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace maf_sandbox::emulator {

// "1000m" -> 1.0, "2" -> 2.0. Unparseable, non-finite or non-positive: 0 (unset).
double parse_cpu(const std::string& text);
// "2048Mi" -> bytes ("Ki", "Mi", "Gi", "Ti", "K", "M", "G", or none). Unparseable: 0 (unset).
std::uint64_t parse_quantity(const std::string& text);
// The string at `key`; "" when absent or not a string.
std::string string_field(const boost::json::object& o, const char* key);
// "true", "True" and "1" are true; any other text false; absent: `fallback`.
bool truthy(const std::optional<std::string>& value, bool fallback);

// The body's "labels": an object of non-empty keys and string values of at most 63 characters;
// absent or null is none. Refuses 400 otherwise.
std::map<std::string, std::string> parse_labels(const boost::json::object& body);

}  // namespace maf_sandbox::emulator
