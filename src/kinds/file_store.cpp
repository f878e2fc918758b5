#include "maf_sandbox/kinds/file_store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox::kinds {
namespace {

namespace fs = std::filesystem;

bool sendable_name(const std::string& name) {
    if (name.empty() || !is_valid_utf8(name)) {
        return false;
    }
    return std::none_of(name.begin(), name.end(), [](char c) {
        const auto byte = static_cast<unsigned char>(c);
        return byte < 0x20 || byte == 0x7f || c == '\\';
    });
}

// Closes the descriptor on every path out of read().
class ScopedFd {
  public:
    explicit ScopedFd(int fd) : fd_(fd) {}
    ~ScopedFd() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    ScopedFd(const ScopedFd&) = delete;
    ScopedFd& operator=(const ScopedFd&) = delete;
    int get() const { return fd_; }

  private:
    int fd_;
};

}  // namespace

FileStore::FileStore(fs::path root) {
    std::error_code error;
    if (!fs::is_directory(root, error)) {
        throw InvalidArgument(fmt::format(
            "the file store '{}' is not a directory; create it or point --files at a directory",
            root.string()));
    }
    root_ = fs::canonical(root, error);
    if (error) {
        throw InvalidArgument(fmt::format("the file store '{}' cannot be resolved: {}",
                                          root.string(), error.message()));
    }
}

std::vector<std::string> FileStore::list() const {
    std::vector<std::string> names;
    if (!root_) {
        return names;
    }
    std::error_code error;
    // Directory links are not followed (the default), so the walk never leaves the root.
    fs::recursive_directory_iterator it(*root_, fs::directory_options::skip_permission_denied,
                                        error);
    for (; !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
        const auto status = it->symlink_status(error);
        if (error || !fs::is_regular_file(status)) {
            error.clear();
            continue;
        }
        auto name = it->path().lexically_relative(*root_).generic_string();
        if (sendable_name(name)) {
            names.push_back(std::move(name));
        }
    }
    std::sort(names.begin(), names.end());
    return names;
}

bool FileStore::contains(std::string_view name) const {
    const auto names = list();
    return std::binary_search(names.begin(), names.end(), name);
}

std::optional<std::uint64_t> FileStore::size_of(std::string_view name) const {
    if (!contains(name)) {
        return std::nullopt;
    }
    struct stat info {};
    if (::lstat((*root_ / fs::path(std::string(name))).c_str(), &info) != 0 ||
        !S_ISREG(info.st_mode)) {
        return std::nullopt;
    }
    return static_cast<std::uint64_t>(info.st_size);
}

std::string FileStore::read(std::string_view name, std::uint64_t max_bytes) const {
    if (!contains(name)) {
        throw InvalidArgument(fmt::format("'{}' is not in the file store", name));
    }
    const auto path = *root_ / fs::path(std::string(name));
    // O_NOFOLLOW: a leaf swapped for a link after listing is refused, not followed.
    ScopedFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) {
        throw FileError(fmt::format("could not open store file '{}'", name), errno);
    }
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
        throw FileError(fmt::format("store file '{}' is not a regular file", name));
    }
    if (static_cast<std::uint64_t>(info.st_size) > max_bytes) {
        throw SandboxTransferCapExceeded(
            fmt::format("store file '{}' is {} bytes, over the {}-byte per-file cap", name,
                        info.st_size, max_bytes));
    }
    std::string content;
    char buffer[64 * 1024];
    for (;;) {
        const auto n = ::read(fd.get(), buffer, sizeof buffer);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw FileError(fmt::format("could not read store file '{}'", name), errno);
        }
        if (n == 0) {
            break;
        }
        content.append(buffer, static_cast<std::size_t>(n));
        // The file may grow after fstat: the cap holds for what is actually read.
        if (content.size() > max_bytes) {
            throw SandboxTransferCapExceeded(
                fmt::format("store file '{}' grew over the {}-byte per-file cap while being read",
                            name, max_bytes));
        }
    }
    return content;
}

}  // namespace maf_sandbox::kinds
