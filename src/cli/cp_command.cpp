// `maf-sandbox cp SRC DST`: one file into or out of a live local sandbox, `ID:PATH` naming the
// sandbox's side as `docker cp` spells it. The sandbox's side goes through the backend's confined
// file plane (Sandbox::write_file and read_file: no link followed, nothing outside the sandbox's
// root), never through a host path into the sandbox's tree; the host's side is the host user's own
// choice, read as given and landed through land_bytes_beneath (atomic, no partial file).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "cli.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"

namespace maf_sandbox::cli {

namespace {

namespace fs = std::filesystem;

// The most one cp moves, held in memory on the way (the local backend's per-file limit).
constexpr std::uint64_t kMaxCopyBytes = 1ull << 30;

struct SandboxSide {
    std::string id;
    std::string path;
};

// `ID:PATH` when the text before the first ':' is a non-empty name with no '/': a host path
// holding a colon is spelt with a '/' before it (./a:b), as docker cp asks.
std::optional<SandboxSide> sandbox_side(const std::string& value) {
    const auto colon = value.find(':');
    if (colon == std::string::npos || colon == 0 ||
        value.substr(0, colon).find('/') != std::string::npos) {
        return std::nullopt;
    }
    return SandboxSide{value.substr(0, colon), value.substr(colon + 1)};
}

// An absolute guest path names that path in the sandbox; a relative one resolves beneath the
// sandbox's working directory, where `exec` starts.
std::string working_directory_for(const std::string& guest_path) {
    return guest_path.starts_with('/') ? "/" : "";
}

std::string base_name(const std::string& path) {
    auto trimmed = path;
    while (trimmed.size() > 1 && trimmed.back() == '/') {
        trimmed.pop_back();
    }
    return fs::path(trimmed).filename().string();
}

class HostFd {
  public:
    explicit HostFd(int fd) : fd_(fd) {}
    HostFd(const HostFd&) = delete;
    HostFd& operator=(const HostFd&) = delete;
    ~HostFd() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    int get() const { return fd_; }

  private:
    int fd_;
};

std::string read_host_file(const std::string& path) {
    // The host file is the host user's own choice, so its links are followed.
    HostFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat info {};
    if (fd.get() < 0 || ::fstat(fd.get(), &info) != 0) {
        throw InvalidArgument(fmt::format("cp: cannot read the host file '{}': {}; check the path",
                                          path, std::strerror(errno)));
    }
    if (S_ISDIR(info.st_mode)) {
        throw InvalidArgument(fmt::format(
            "cp: '{}' is a directory, and cp copies one file; copy a tree as an archive "
            "(tar -C '{}' -cf tree.tar .), cp that in and unpack it with exec",
            path, path));
    }
    std::string bytes;
    char buffer[1 << 16];
    for (;;) {
        const auto n = ::read(fd.get(), buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            throw InvalidArgument(fmt::format("cp: reading the host file '{}' failed: {}", path,
                                              std::strerror(errno)));
        }
        if (n == 0) {
            return bytes;
        }
        if (bytes.size() + static_cast<std::size_t>(n) > kMaxCopyBytes) {
            throw InvalidArgument(
                fmt::format("cp: the host file '{}' holds more than {} bytes, the most cp copies",
                            path, kMaxCopyBytes));
        }
        bytes.append(buffer, static_cast<std::size_t>(n));
    }
}

// Where a file copied out lands: under its own name in an existing directory, else at the path
// given, whose directory must exist and be writable (nothing is created on the host but the file).
std::pair<fs::path, std::string> host_destination(const std::string& destination,
                                                  const std::string& source_name) {
    struct stat info {};
    const bool is_dir = ::stat(destination.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
    if (!is_dir && destination.ends_with('/')) {
        throw InvalidArgument(fmt::format(
            "cp: the host directory '{}' does not exist; create it first", destination));
    }
    fs::path directory = is_dir ? fs::path(destination) : fs::path(destination).parent_path();
    const std::string name = is_dir ? source_name : fs::path(destination).filename().string();
    if (directory.empty()) {
        directory = ".";
    }
    if (::stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
        throw InvalidArgument(
            fmt::format("cp: cannot write '{}': its directory '{}' does not exist; create it first",
                        destination, directory.string()));
    }
    // access(2) answers EROFS for a read-only mount even to root.
    if (::access(directory.c_str(), W_OK | X_OK) != 0) {
        throw InvalidArgument(
            fmt::format("cp: cannot write '{}': the directory '{}' is not writable ({}); copy to "
                        "a directory this user can write on a writable file system",
                        destination, directory.string(), std::strerror(errno)));
    }
    return {directory, name};
}

void copy_in(boost::asio::io_context& io, Sandbox& sandbox, const std::string& host,
             const SandboxSide& guest) {
    auto bytes = read_host_file(host);
    auto path = guest.path;
    const auto work = working_directory_for(path);
    // Into a directory (the working directory itself when PATH is empty or '.'), under the host
    // file's own name.
    if (path.empty() || path == ".") {
        path = base_name(host);
    } else if (path.ends_with('/')) {
        path += base_name(host);
    } else if (const auto existing = run_blocking(io, sandbox.stat_file(path, work));
               existing && existing->kind == EntryKind::directory) {
        path += "/" + base_name(host);
    }
    run_blocking(io, sandbox.write_file(path, std::move(bytes), work));
}

void copy_out(boost::asio::io_context& io, Sandbox& sandbox, const SandboxSide& guest,
              const std::string& host) {
    const auto work = working_directory_for(guest.path);
    const auto entry = run_blocking(io, sandbox.stat_file(guest.path, work));
    if (!entry) {
        throw InvalidArgument(
            fmt::format("cp: sandbox {} has no file '{}'; check the path", guest.id, guest.path));
    }
    if (entry->kind == EntryKind::directory) {
        throw InvalidArgument(fmt::format(
            "cp: '{}' in sandbox {} is a directory, and cp copies one file; pack it first "
            "(exec -- tar -C '{}' -cf /tmp/tree.tar .) and cp the archive out",
            guest.path, guest.id, guest.path));
    }
    const auto [directory, name] = host_destination(host, base_name(guest.path));
    const auto bytes = run_blocking(io, sandbox.read_file(guest.path, work, kMaxCopyBytes));
    try {
        land_bytes_beneath(directory, name, bytes);
    } catch (const SandboxOutputError& e) {
        throw SandboxOutputError(fmt::format("cp: '{}' was not written ({} bytes): {}",
                                             (directory / name).string(), bytes.size(), e.what()));
    }
}

struct CpOptions {
    std::string backend = "local";
    std::string source, destination;
};

}  // namespace

void add_cp_command(CLI::App& app, Context& context) {
    auto options = std::make_shared<CpOptions>();
    auto* command = app.add_subcommand(
        "cp",
        "Copy one file into or out of a live local sandbox: cp HOSTFILE ID:PATH, or cp ID:PATH "
        "HOSTPATH (ID as `ls` prints it; a relative PATH is beneath the sandbox's working "
        "directory)");
    command->add_option("--backend", options->backend, "local (default)");
    command->add_option("source", options->source, "HOSTFILE or ID:PATH")->required();
    command->add_option("destination", options->destination, "ID:PATH or HOSTPATH")->required();
    command->callback([options, &context] {
        if (options->backend != "local") {
            throw InvalidArgument(fmt::format(
                "cp copies to and from local sandboxes only; --backend {} is not supported here "
                "(move files with an ACAS sandbox through `run --in` and `--out`)",
                options->backend));
        }
        const auto from = sandbox_side(options->source);
        const auto to = sandbox_side(options->destination);
        if (from.has_value() == to.has_value()) {
            throw InvalidArgument(
                from ? "cp: both sides name a sandbox; copy through the host in two steps"
                     : "cp: neither side names a sandbox; write one side as ID:PATH (ID as "
                       "`maf-sandbox ls` prints it; a host path with a ':' needs a '/' before it, "
                       "as in ./a:b)");
        }
        local::LocalBackend backend;
        boost::asio::io_context io;
        const auto sandbox = backend.open(from ? from->id : to->id);
        if (to) {
            copy_in(io, *sandbox, options->source, *to);
        } else {
            copy_out(io, *sandbox, *from, options->destination);
        }
        context.exit_code = kExitOk;
    });
}

}  // namespace maf_sandbox::cli
