#include "maf_sandbox/core/errors.hpp"

#include <fmt/format.h>
#include <cstring>

namespace maf_sandbox {

namespace {
std::string describe_system_error(int error_number, const std::string& doing,
                                  const std::string& remedy) {
    auto text = fmt::format("{}: {}", doing, std::strerror(error_number));
    if (!remedy.empty()) {
        text += fmt::format("; {}", remedy);
    }
    return text;
}
}  // namespace

SystemError::SystemError(int error_number, const std::string& doing, const std::string& remedy)
    : Error(describe_system_error(error_number, doing, remedy)), error_number_(error_number) {}

}  // namespace maf_sandbox
