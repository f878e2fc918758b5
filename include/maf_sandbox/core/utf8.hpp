// UTF-8 helpers for text views over program bytes.
#pragma once

#include <string>
#include <string_view>

namespace maf_sandbox {

// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD (maximal subparts, as Python's
// errors="replace" and the WHATWG decoder do). Valid input is returned unchanged.
std::string replace_invalid_utf8(std::string_view bytes);

// True when `bytes` is entirely valid UTF-8.
bool is_valid_utf8(std::string_view bytes);

// Untrusted text made fit to quote in a message: invalid sequences replaced, then cut to at most
// `max_bytes` on a code point boundary, with " (truncated)" appended when anything was cut.
std::string bounded_utf8(std::string_view text, std::size_t max_bytes);

}  // namespace maf_sandbox
