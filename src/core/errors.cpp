#include "maf_sandbox/core/errors.hpp"

#include <fmt/format.h>
#include <cerrno>
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

static_assert(EACCES == 13, "the default errno of SandboxFilePermissionRefused is EACCES");

// The most derived class initialises the virtual FileError base, once.
SandboxFilePermissionRefused::SandboxFilePermissionRefused(const std::string& message,
                                                           int error_number)
    : FileError(message, error_number),
      SandboxFileRefused(FileRefusal::permission_denied, message, error_number),
      PermissionDenied(message, error_number) {}

void throw_file_refused(FileRefusal refusal, const std::string& message) {
    if (refusal == FileRefusal::permission_denied) {
        throw SandboxFilePermissionRefused(message);
    }
    throw SandboxFileRefused(refusal, message);
}

SystemError::SystemError(int error_number, const std::string& doing, const std::string& remedy)
    : Error(describe_system_error(error_number, doing, remedy)), error_number_(error_number) {}

}  // namespace maf_sandbox
