// The command line's shared parsing helpers: sizes and durations with their suffixes, and the
// "did you mean" answer to a mistyped command or option (CLI11 has none of its own).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace maf_sandbox::cli {

// Transformers for add_option(...)->transform(...): the text as typed (`512M`, `2G`, `90s`, `2m`)
// becomes the plain number of bytes or seconds the option stores. A mistake, or zero, is refused
// with the accepted forms.
CLI::Validator byte_size();
CLI::Validator duration();
// A whole number above zero (a process limit, a pool size), refused in words, not as a range.
CLI::Validator positive_count();

// The closest of `candidates` to `typed` that is close enough to be a typo (or that `typed` is a
// prefix of); empty when none is.
std::string closest(const std::string& typed, const std::vector<std::string>& candidates);

// For a parse that failed: the first command or option in argv that `app` does not know, said with
// a suggestion ("unknown command 'rnu' ...; did you mean 'run'?"); empty when every word is known
// and the failure is of another kind.
std::string explain_unknown_word(CLI::App& app, int argc, const char* const* argv);

}  // namespace maf_sandbox::cli
