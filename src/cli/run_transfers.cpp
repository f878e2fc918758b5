#include "run_transfers.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <map>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/outputs.hpp"

namespace maf_sandbox::cli {

namespace {

namespace fs = std::filesystem;

std::string ascii_lower(std::string_view text) {
    std::string lowered(text);
    std::transform(lowered.begin(), lowered.end(), lowered.begin(), [](char c) {
        return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    });
    return lowered;
}

// The message for a host file that cannot be read; a value with a colon may have been split where
// the caller did not mean it.
[[noreturn]] void unreadable(const InputTransfer& input, std::string_view why) {
    const bool split = input.value.find(':') != std::string::npos;
    throw InvalidArgument(fmt::format(
        "--in '{}': cannot read the host file '{}': {}; check the path{}", input.value, input.host,
        why,
        split ? " (HOST:GUEST splits at the last ':'; end the value with ':' to take it whole as "
                "the host path)"
              : ""));
}

class ReadFd {
  public:
    explicit ReadFd(int fd) : fd_(fd) {}
    ReadFd(const ReadFd&) = delete;
    ReadFd& operator=(const ReadFd&) = delete;
    ~ReadFd() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    int get() const { return fd_; }

  private:
    int fd_;
};

}  // namespace

InputTransfer parse_input(const std::string& value) {
    InputTransfer input;
    input.value = value;
    const auto colon = value.rfind(':');
    if (colon == std::string::npos || colon + 1 == value.size()) {
        input.host = colon == std::string::npos ? value : value.substr(0, colon);
        input.guest = fs::path(input.host).filename().string();
    } else {
        input.host = value.substr(0, colon);
        input.guest = value.substr(colon + 1);
    }
    if (input.host.empty()) {
        throw InvalidArgument(
            fmt::format("--in '{}' names no host file; pass HOSTFILE[:GUESTPATH]", value));
    }
    if (input.guest.empty()) {
        throw InvalidArgument(fmt::format(
            "--in '{}': the host path '{}' has no file name to land under; name the guest path "
            "(HOSTFILE:GUESTPATH)",
            value, input.host));
    }
    return input;
}

std::string read_host_input(const InputTransfer& input, std::uint64_t max_bytes) {
    // The host file is the host user's own choice, so its links are followed.
    ReadFd fd(::open(input.host.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
        unreadable(input, std::strerror(errno));
    }
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0) {
        unreadable(input, std::strerror(errno));
    }
    if (S_ISDIR(info.st_mode)) {
        // Refused rather than read as an empty file (which is what reading a directory gives).
        throw InvalidArgument(fmt::format(
            "--in '{}' is a directory, and --in copies one file; pass each file with its own "
            "--in, or an archive of the tree (tar -C '{}' -cf tree.tar .) to unpack in the command",
            input.host, input.host));
    }
    std::string bytes;
    char buffer[1 << 16];
    for (;;) {
        const auto n = ::read(fd.get(), buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            unreadable(input, std::strerror(errno));
        }
        if (n == 0) {
            return bytes;
        }
        if (bytes.size() + static_cast<std::size_t>(n) > max_bytes) {
            unreadable(input, fmt::format("it holds more than {} bytes", max_bytes));
        }
        bytes.append(buffer, static_cast<std::size_t>(n));
    }
}

std::vector<OutputTransfer> plan_outputs(const std::vector<std::string>& outputs) {
    std::vector<OutputTransfer> planned;
    std::map<std::string, std::string> guest_by_key;  // folded name -> the --out that has it
    for (const auto& guest : outputs) {
        const auto name = fs::path(guest).filename().string();
        if (name.empty() || name == "." || name == "..") {
            throw InvalidArgument(fmt::format(
                "--out '{}' names no file to land (it ends in '/', '.' or '..'); name a file",
                guest));
        }
        if (auto [it, inserted] = guest_by_key.emplace(ascii_lower(name), guest); !inserted) {
            const auto& first = it->second;
            throw InvalidArgument(
                first == guest
                    ? fmt::format("--out '{}' is given twice; give each output once", guest)
                    : fmt::format(
                          "--out '{}' and --out '{}' would land on one file in --out-dir (their "
                          "base names '{}' and '{}' are {}); give each a distinct base name",
                          first, guest, fs::path(first).filename().string(), name,
                          fs::path(first).filename().string() == name
                              ? "the same"
                              : "the same but for letter case, which some file systems merge"));
        }
        planned.push_back(OutputTransfer{guest, name});
    }
    return planned;
}

void require_out_dir(const fs::path& out_dir) {
    struct stat info {};
    if (::stat(out_dir.c_str(), &info) != 0) {
        throw InvalidArgument(fmt::format(
            "--out-dir '{}' cannot be used: {}; create it first (outputs are never landed "
            "elsewhere)",
            out_dir.string(), std::strerror(errno)));
    }
    if (!S_ISDIR(info.st_mode)) {
        throw InvalidArgument(
            fmt::format("--out-dir '{}' is not a directory; name a directory", out_dir.string()));
    }
    // access(2) answers EROFS for a read-only mount even to root, and EACCES by the real ids.
    if (::access(out_dir.c_str(), W_OK | X_OK) != 0) {
        throw InvalidArgument(
            fmt::format("--out-dir '{}' is not writable: {}; name a directory "
                        "this user can write on a writable file system",
                        out_dir.string(), std::strerror(errno)));
    }
}

void land_output(const fs::path& out_dir, const OutputTransfer& output, std::string_view bytes) {
    try {
        land_bytes_beneath(out_dir, output.name, bytes);
    } catch (const SandboxOutputError& e) {
        // The host path is the host user's own, so the CLI names it (the core message does not).
        std::throw_with_nested(SandboxOutputError(
            fmt::format("--out '{}' was not landed at '{}' ({} bytes): {}", output.guest,
                        (out_dir / output.name).string(), bytes.size(), e.what())));
    }
}

}  // namespace maf_sandbox::cli
