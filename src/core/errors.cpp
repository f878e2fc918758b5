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

const char* Error::what() const noexcept {
    return wrapped_ ? wrapped_->c_str() : std::runtime_error::what();
}

void Error::add_context(std::string_view doing) noexcept {
    if (doing.empty())
        return;
    try {
        wrapped_ = std::make_shared<const std::string>(fmt::format("{}: {}", doing, what()));
    } catch (...) {
        // Out of memory while unwinding: the error goes up without this layer's context.
    }
}

SystemError::SystemError(int error_number, const std::string& doing, const std::string& remedy)
    : Error(describe_system_error(error_number, doing, remedy)), error_number_(error_number) {}

}  // namespace maf_sandbox
