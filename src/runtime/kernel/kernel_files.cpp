#include "maf_sandbox/runtime/kernel/kernel_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

std::optional<std::string> read_kernel_fd(int fd) {
    std::string text;
    char buffer[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return std::nullopt;
        }
        if (n == 0) {
            return text;
        }
        text.append(buffer, static_cast<std::size_t>(n));
    }
}

std::optional<std::string> read_kernel_file(const std::filesystem::path& file) {
    UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        return std::nullopt;
    }
    return read_kernel_fd(fd.get());
}

}  // namespace maf_sandbox::runtime
