// POSIX shell quoting for every command the project hands to a guest shell. Backends quote an argv
// with shell_join before any shell sees it, so a hostile argument is one literal word.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace maf_sandbox {

// `word` as one single-quoted POSIX shell word; each `'` inside becomes `'\''`. Always quotes
// (the empty word becomes ''), so the result never expands, globs or splits.
inline std::string shell_quote(std::string_view word) {
    std::string quoted;
    quoted.reserve(word.size() + 2);
    quoted.push_back('\'');
    for (char c : word) {
        if (c == '\'') {
            quoted += "'\\''";
        } else {
            quoted.push_back(c);
        }
    }
    quoted.push_back('\'');
    return quoted;
}

// Every word of `argv` quoted with shell_quote, joined by single spaces.
inline std::string shell_join(const std::vector<std::string>& argv) {
    std::string line;
    for (const auto& word : argv) {
        if (!line.empty()) {
            line.push_back(' ');
        }
        line += shell_quote(word);
    }
    return line;
}

}  // namespace maf_sandbox
