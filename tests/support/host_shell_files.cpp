// HostShellSandbox's file methods: native syscalls on this host, each path confined to its working
// directory with the lstat ancestor walk from the root (paths.hpp), links named and never followed.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "host_shell_sandbox.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"

namespace maf_sandbox::testing {

namespace fs = std::filesystem;

namespace {

class Fd {
  public:
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }

  private:
    int fd_;
};

std::optional<SandboxEntry> lstat_entry(const std::string& absolute, std::string reported) {
    struct stat info {};
    if (::lstat(absolute.c_str(), &info) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
            return std::nullopt;
        }
        throw FileError(fmt::format("could not stat '{}': {}", absolute, std::strerror(errno)),
                        errno);
    }
    SandboxEntry entry{std::move(reported), EntryKind::other, std::nullopt};
    if (S_ISREG(info.st_mode)) {
        entry.kind = EntryKind::file;
        entry.size_bytes = static_cast<std::uint64_t>(info.st_size);
    } else if (S_ISDIR(info.st_mode)) {
        entry.kind = EntryKind::directory;
        entry.size_bytes = static_cast<std::uint64_t>(info.st_size);
    } else if (S_ISLNK(info.st_mode)) {
        entry.kind = EntryKind::symlink;
    }
    return entry;
}

// The unconfined, no-follow stat the ancestor walk runs over.
NoFollowStat host_lstat() {
    return [](std::string path) -> Task<std::optional<SandboxEntry>> {
        co_return lstat_entry(path, path);
    };
}

std::string relative_to(const std::string& resolved, const std::string& working_directory) {
    return guest_path_relative_to(resolved, working_directory).value_or(resolved);
}

std::string random_hex(std::size_t digits) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::random_device device;
    std::uniform_int_distribution<int> nibble(0, 15);
    std::string text;
    for (std::size_t i = 0; i < digits; ++i) {
        text += kHex[nibble(device)];
    }
    return text;
}

void write_all(int fd, std::string_view bytes, const std::string& path) {
    while (!bytes.empty()) {
        const auto written = ::write(fd, bytes.data(), bytes.size());
        if (written < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw FileError(fmt::format("could not write '{}': {}", path, std::strerror(errno)),
                            errno);
        }
        bytes.remove_prefix(static_cast<std::size_t>(written));
    }
}

}  // namespace

HostShellSandbox::HostShellSandbox() {
    std::string pattern = (fs::temp_directory_path() / "maf-host-shell-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
        throw SystemError(errno, "creating the host shell test sandbox's base directory");
    }
    // The walk from the root must see real directories, so the base is named without links.
    base_ = fs::canonical(pattern).string();
}

HostShellSandbox::~HostShellSandbox() {
    std::error_code ignored;
    fs::remove_all(base_, ignored);
}

std::string HostShellSandbox::working_directory_of(const std::string& working_directory) const {
    return resolve_working_directory(working_directory, base_);
}

Task<void> HostShellSandbox::write_file(std::string path, std::string content,
                                        std::string working_directory) {
    const auto directory = working_directory_of(working_directory);
    const auto resolved = co_await confine_guest_write_path(host_lstat(), path, directory);
    const auto parent = guest_dirname(resolved);
    std::error_code error;
    fs::create_directories(parent, error);
    if (error) {
        throw FileError(
            fmt::format("could not create the parents of '{}': {}", path, error.message()),
            error.value());
    }
    // Staged sibling then rename, so a reader polling for the file never sees it half written.
    const auto staged = parent + "/.maf-" + random_hex(32) + ".part";
    {
        Fd fd(::open(staged.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
        if (fd.get() < 0) {
            throw FileError(fmt::format("could not create '{}': {}", path, std::strerror(errno)),
                            errno);
        }
        write_all(fd.get(), content, path);
    }
    if (::rename(staged.c_str(), resolved.c_str()) != 0) {
        const int saved = errno;
        ::unlink(staged.c_str());
        if (saved == EISDIR) {
            throw IsADirectory(fmt::format("'{}' is a directory; write to a file path", path),
                               saved);
        }
        throw FileError(fmt::format("could not write '{}': {}", path, std::strerror(saved)), saved);
    }
    co_return;
}

Task<std::optional<SandboxEntry>> HostShellSandbox::stat_file(std::string path,
                                                              std::string working_directory) {
    const auto directory = working_directory_of(working_directory);
    const auto resolved = confine_guest_path(path, directory);
    co_await refuse_symlinked_ancestors(host_lstat(), resolved, directory);
    co_return lstat_entry(resolved, relative_to(resolved, directory));
}

Task<std::string> HostShellSandbox::read_file(std::string path, std::string working_directory,
                                              std::uint64_t max_bytes) {
    const auto directory = working_directory_of(working_directory);
    const auto resolved = confine_guest_path(path, directory);
    co_await refuse_symlinked_ancestors(host_lstat(), resolved, directory);
    Fd fd(::open(resolved.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (fd.get() < 0) {
        const int saved = errno;
        if (saved == ENOENT) {
            throw FileNotFound(fmt::format("'{}' does not exist", path), saved);
        }
        if (saved == ELOOP) {
            throw FileError(fmt::format("'{}' is a link; links are never read", path), saved);
        }
        throw FileError(fmt::format("could not open '{}': {}", path, std::strerror(saved)), saved);
    }
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0) {
        throw FileError(fmt::format("could not stat '{}': {}", path, std::strerror(errno)), errno);
    }
    if (S_ISDIR(info.st_mode)) {
        throw IsADirectory(fmt::format("'{}' is a directory; only regular files are read", path),
                           EISDIR);
    }
    if (!S_ISREG(info.st_mode)) {
        throw FileError(
            fmt::format("'{}' is not a regular file; only regular files are read", path));
    }
    if (static_cast<std::uint64_t>(info.st_size) > max_bytes) {
        throw SandboxTransferCapExceeded(
            fmt::format("'{}' holds {} bytes, over the cap of {} bytes; it was not read", path,
                        info.st_size, max_bytes));
    }
    std::string content;
    std::array<char, 65536> buffer{};
    for (;;) {
        const auto count = ::read(fd.get(), buffer.data(), buffer.size());
        if (count < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw FileError(fmt::format("could not read '{}': {}", path, std::strerror(errno)),
                            errno);
        }
        if (count == 0) {
            break;
        }
        content.append(buffer.data(), static_cast<std::size_t>(count));
        if (content.size() > max_bytes) {
            throw SandboxTransferCapExceeded(
                fmt::format("'{}' grew over the cap of {} bytes while it was read; it was not read",
                            path, max_bytes));
        }
    }
    co_return content;
}

Task<std::vector<SandboxEntry>> HostShellSandbox::list_dir(std::string path,
                                                           std::string working_directory) {
    const auto directory = working_directory_of(working_directory);
    const auto resolved = confine_guest_path(path, directory);
    co_await refuse_symlinked_ancestors(host_lstat(), resolved, directory, true);
    DIR* handle = ::opendir(resolved.c_str());
    if (handle == nullptr) {
        const int saved = errno;
        if (saved == ENOENT) {
            throw FileNotFound(fmt::format("'{}' does not exist", path), saved);
        }
        if (saved == ENOTDIR) {
            throw NotADirectory(fmt::format("'{}' is not a directory", path), saved);
        }
        throw FileError(fmt::format("could not list '{}': {}", path, std::strerror(saved)), saved);
    }
    std::vector<SandboxEntry> entries;
    try {
        while (const dirent* child = ::readdir(handle)) {
            const std::string name = child->d_name;
            if (name == "." || name == "..") {
                continue;
            }
            const auto absolute = join_guest_path(resolved, name);
            if (auto entry = lstat_entry(absolute, relative_to(absolute, directory))) {
                entries.push_back(std::move(*entry));
            }
        }
    } catch (...) {
        ::closedir(handle);
        throw;
    }
    ::closedir(handle);
    std::sort(entries.begin(), entries.end(),
              [](const SandboxEntry& a, const SandboxEntry& b) { return a.path < b.path; });
    co_return entries;
}

Task<void> HostShellSandbox::remove(std::string path, std::string working_directory,
                                    bool recursive) {
    const auto directory = working_directory_of(working_directory);
    const auto resolved = confine_guest_path(path, directory);
    if (resolved == directory) {
        throw ConfinementEscape(fmt::format(
            "'{}' names the working directory itself; remove something inside it", path));
    }
    co_await refuse_symlinked_ancestors(host_lstat(), resolved, directory);
    const auto entry = lstat_entry(resolved, path);
    if (!entry) {
        co_return;
    }
    if (entry->kind == EntryKind::directory) {
        if (!recursive) {
            throw FileError(fmt::format("'{}' is a directory; remove it with recursive", path),
                            EISDIR);
        }
        // remove_all unlinks links inside the tree and never follows them.
        std::error_code error;
        fs::remove_all(resolved, error);
        if (error) {
            throw FileError(fmt::format("could not remove '{}': {}", path, error.message()),
                            error.value());
        }
        co_return;
    }
    if (::unlink(resolved.c_str()) != 0 && errno != ENOENT) {
        throw FileError(fmt::format("could not remove '{}': {}", path, std::strerror(errno)),
                        errno);
    }
}

Task<void> HostShellSandbox::reclaim(std::string directory, std::string working_directory,
                                     Seconds) {
    if (directory.empty() || directory.front() != '/') {
        throw InvalidArgument(
            fmt::format("reclaim needs an absolute directory, not '{}'", directory));
    }
    const auto resolved = normpath(directory);
    const auto components =
        std::count_if(resolved.begin(), resolved.end(), [](char c) { return c == '/'; });
    if (resolved == "/" || components < 2) {
        throw InvalidArgument(
            fmt::format("reclaim refuses '{}': it needs at least two path components", directory));
    }
    if (resolved == working_directory_of(working_directory)) {
        throw ConfinementEscape(
            fmt::format("reclaim refuses '{}': it is the working directory itself", directory));
    }
    co_await refuse_symlinked_ancestors(host_lstat(), resolved, "/");
    const auto entry = lstat_entry(resolved, resolved);
    if (!entry) {
        co_return;
    }
    std::error_code error;
    if (entry->kind == EntryKind::directory) {
        fs::remove_all(resolved, error);
    } else {
        fs::remove(resolved, error);
    }
    if (error) {
        throw FileError(fmt::format("could not reclaim '{}': {}", directory, error.message()),
                        error.value());
    }
}

}  // namespace maf_sandbox::testing
