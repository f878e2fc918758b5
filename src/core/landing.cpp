// Landing bytes on the host under a directory the host chose, by a name the sandbox chose:
// fd-relative from the landing directory, never following a link below it.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <cstring>

#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/random_id.hpp"

namespace maf_sandbox {
namespace {

namespace fs = std::filesystem;

class Fd {
  public:
    explicit Fd(int fd) : fd_(fd) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    Fd& operator=(Fd&& other) noexcept {
        std::swap(fd_, other.fd_);
        return *this;
    }
    ~Fd() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }
    // Closes now, returning close's errno (0 when it succeeded): some file systems report a
    // failed write-back only here.
    int close_checked() {
        const int error = ::close(std::exchange(fd_, -1)) == 0 ? 0 : errno;
        return error == EINTR ? 0 : error;  // Linux has closed the descriptor either way
    }

  private:
    int fd_;
};

// Beneath `dir` only, through no link of any kind and onto no other mount.
int open_beneath(int dir, const std::string& name, int flags, mode_t mode = 0) {
    open_how how{};
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
    how.mode = (flags & O_CREAT) != 0 ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    int fd;
    do {
        fd = static_cast<int>(::syscall(SYS_openat2, dir, name.c_str(), &how, sizeof how));
    } while (fd < 0 && (errno == EAGAIN || errno == EINTR));
    return fd;
}

[[noreturn]] void not_confined(std::string_view name) {
    throw SandboxLandingNotConfined(fmt::format(
        "artifact '{}' would land through a link, onto another mount or outside the host's "
        "landing directory; rename the artifact or remove the link from the landing directory",
        name));
}

[[noreturn]] void landing_failed(std::string_view name, std::string_view doing, int error) {
    if (error == ELOOP || error == EXDEV) {
        not_confined(name);
    }
    throw SandboxOutputError(fmt::format(
        "artifact '{}' could not be landed: {} failed ({}); check the landing directory's "
        "permissions and free space",
        name, doing, std::strerror(error)));
}

std::string random_suffix() {
    try {
        return random_hex(8);
    } catch (const SystemError&) {
        return std::to_string(::getpid());  // still unique among this host's landings
    }
}

}  // namespace

fs::path land_bytes_beneath(const fs::path& root, std::string_view name, std::string_view content) {
    validate_artifact_name(name);
    // The landing directory itself is the host's choice (its own links included).
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec) {
        landing_failed(name, "creating the landing directory", ec.value());
    }
    Fd dir(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid()) {
        landing_failed(name, "opening the landing directory", errno);
    }
    // Each parent made and entered by descriptor: a name below the root is never followed.
    const std::string text(name);
    std::size_t start = 0;
    for (auto slash = text.find('/'); slash != std::string::npos; slash = text.find('/', start)) {
        const std::string component = text.substr(start, slash - start);
        start = slash + 1;
        if (::mkdirat(dir.get(), component.c_str(), 0777) != 0 && errno != EEXIST) {
            landing_failed(name, "creating a directory", errno);
        }
        Fd next(open_beneath(dir.get(), component, O_PATH | O_DIRECTORY));
        if (!next.valid()) {
            landing_failed(name, "entering a directory", errno);
        }
        dir = std::move(next);
    }
    const std::string leaf = text.substr(start);
    // Written to a new sibling (O_EXCL: never through an existing inode, a hard link included),
    // then renamed over the name: a reader sees the old file or the new one.
    const std::string staged = ".maf-landing-" + random_suffix();
    Fd file(open_beneath(dir.get(), staged, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0666));
    if (!file.valid()) {
        landing_failed(name, "creating the file", errno);
    }
    // Any failure before the rename takes the staged file back: the name never holds a part.
    const auto fail = [&](std::string_view doing, int error) {
        ::unlinkat(dir.get(), staged.c_str(), 0);
        landing_failed(name, doing, error);
    };
    std::size_t done = 0;
    while (done < content.size()) {
        const auto n = ::write(file.get(), content.data() + done, content.size() - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            fail("writing the file", n < 0 ? errno : EIO);
        }
        done += static_cast<std::size_t>(n);
    }
    // On the disk before it has the name: a crash or a deferred write error never leaves the name
    // on a file that is shorter than what was reported landed.
    if (::fsync(file.get()) != 0) {
        fail("flushing the file to disk", errno);
    }
    if (const int error = file.close_checked(); error != 0) {
        fail("closing the file", error);
    }
    if (::renameat(dir.get(), staged.c_str(), dir.get(), leaf.c_str()) != 0) {
        fail("renaming the file into place", errno);
    }
    // The rename itself made durable. An O_PATH descriptor cannot be fsynced, so the directory is
    // reopened (beneath itself, ".") for reading.
    Fd parent(open_beneath(dir.get(), ".", O_RDONLY | O_DIRECTORY));
    if (!parent.valid() || ::fsync(parent.get()) != 0) {
        landing_failed(name, "flushing the landing directory to disk", errno);
    }
    return root / fs::path(text);
}

}  // namespace maf_sandbox
