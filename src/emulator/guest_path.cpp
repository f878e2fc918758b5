#include "guest_path.hpp"

#include <fmt/format.h>

#include "maf_sandbox/core/utf8.hpp"
#include "refusal.hpp"

namespace maf_sandbox::emulator {

std::string resolve_guest_path(std::string_view path, std::string_view working_directory) {
    if (path.empty()) {
        throw Refusal{400, kValidationFailed, "The 'path' query parameter is required."};
    }
    if (path.find('\0') != std::string_view::npos) {
        throw Refusal{400, "InvalidPath",
                      fmt::format("The path '{}' holds a NUL byte.",
                                  replace_invalid_utf8(std::string(path.substr(0, 200))))};
    }
    if (path.front() == '/') {
        return std::string(path);
    }
    std::string out(working_directory);
    if (out.empty() || out.back() != '/') {
        out.push_back('/');
    }
    out.append(path);
    return out;
}

}  // namespace maf_sandbox::emulator
