#include "exec_env.hpp"

#include <cstdlib>
#include <fstream>
#include <string_view>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::cli {

namespace {

bool valid_name(std::string_view name) {
    if (name.empty() || (name[0] >= '0' && name[0] <= '9')) {
        return false;
    }
    for (const char c : name) {
        const bool ok =
            (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
        if (!ok) {
            return false;
        }
    }
    return true;
}

// Long lines are cut in messages: the file may be anything the user pointed at.
std::string shown(std::string_view text) {
    constexpr std::size_t kShown = 60;
    return text.size() <= kShown ? std::string(text) : fmt::format("{}...", text.substr(0, kShown));
}

void read_env_file(const std::string& path, std::map<std::string, std::string>& environment) {
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        throw InvalidArgument(fmt::format(
            "--env-file '{}' cannot be read; check the path (one KEY=VALUE a line)", path));
    }
    std::string line;
    for (std::size_t number = 1; std::getline(file, line); ++number) {
        if (!line.empty() && line.back() == '\r') {
            line.pop_back();  // a file written on Windows
        }
        const auto first = line.find_first_not_of(" \t");
        if (first == std::string::npos || line[first] == '#') {
            continue;
        }
        const std::string_view entry = std::string_view(line).substr(first);
        const auto eq = entry.find('=');
        if (eq == std::string_view::npos || !valid_name(entry.substr(0, eq))) {
            throw InvalidArgument(fmt::format(
                "--env-file '{}' line {}: '{}' is not KEY=VALUE with KEY of letters, digits and "
                "_ (not starting with a digit); fix the line, or start it with '#' to skip it",
                path, number, shown(entry)));
        }
        if (entry.find('\0') != std::string_view::npos) {
            throw InvalidArgument(
                fmt::format("--env-file '{}' line {}: the value holds a NUL byte, which no "
                            "environment variable can carry; remove it",
                            path, number));
        }
        environment[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
    }
    if (file.bad()) {
        throw InvalidArgument(fmt::format("--env-file '{}' could not be read to its end", path));
    }
}

}  // namespace

std::map<std::string, std::string> exec_environment(const std::vector<std::string>& pairs,
                                                    const std::vector<std::string>& env_files) {
    std::map<std::string, std::string> environment;
    for (const auto& path : env_files) {
        read_env_file(path, environment);
    }
    for (const auto& pair : pairs) {
        const auto eq = pair.find('=');
        const auto name = pair.substr(0, eq);
        if (!valid_name(name)) {
            throw InvalidArgument(fmt::format(
                "-e '{}': '{}' is not a variable name; pass KEY=VALUE with KEY of letters, "
                "digits and _ (not starting with a digit)",
                shown(pair), shown(name)));
        }
        if (eq != std::string::npos) {
            environment[name] = pair.substr(eq + 1);
            continue;
        }
        // Docker's `-e KEY`: this process's value, so a secret need not appear on a command line.
        const char* value = std::getenv(name.c_str());
        if (value == nullptr) {
            throw InvalidArgument(fmt::format(
                "-e '{}' takes the variable's value from this environment, where it is not set; "
                "set it, or pass -e {}=VALUE",
                name, name));
        }
        environment[name] = value;
    }
    return environment;
}

}  // namespace maf_sandbox::cli
