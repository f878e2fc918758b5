#include "file_plane_staging.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <csignal>
#include <span>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::emulator::staging {

namespace {

constexpr std::string_view kPrefix = ".maf-stage-";

// Exactly `digits` lower-case hex digits (at most 16), as one number.
std::optional<std::uint64_t> hex_number(std::string_view text, std::size_t digits) {
    if (text.size() != digits || digits > 16) {
        return std::nullopt;
    }
    std::uint64_t v = 0;
    for (char c : text) {
        int d;
        if (c >= '0' && c <= '9') {
            d = c - '0';
        } else if (c >= 'a' && c <= 'f') {
            d = c - 'a' + 10;
        } else {
            return std::nullopt;
        }
        v = (v << 4) | static_cast<std::uint64_t>(d);
    }
    return v;
}

// Gone for certain: a live process, or one this task may not signal, exists.
bool writer_gone(pid_t pid) {
    return ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

namespace {

// The writer's pid is a host pid (the file-plane child is not in the guest's pid namespace): the
// name carries it XORed with a keyed mask, so the guest, which sees the name, learns nothing of
// the host's pids. The mask is the tag of pid 0, which no writer has.
std::optional<std::uint32_t> pid_mask(const StageKey& key, std::uint64_t nonce) {
    const auto mask = key.tag(0, nonce);
    if (!mask) {
        return std::nullopt;
    }
    return static_cast<std::uint32_t>(*mask);
}

}  // namespace

std::string staged_name(const StageKey& key, pid_t pid, std::uint64_t nonce) {
    const auto tag = key.tag(pid, nonce);
    const auto mask = pid_mask(key, nonce);
    if (!tag || !mask) {
        throw Error("the file plane could not tag its staged file (out of memory); retry");
    }
    return fmt::format("{}{:08x}-{:016x}-{:016x}", kPrefix, static_cast<std::uint32_t>(pid) ^ *mask,
                       nonce, *tag);
}

std::string new_staged_name(const StageKey& key) {
    std::uint64_t nonce = 0;
    fill_random(std::span(reinterpret_cast<unsigned char*>(&nonce), sizeof nonce));
    return staged_name(key, static_cast<pid_t>(::syscall(SYS_getpid)), nonce);
}

std::optional<pid_t> staged_by(const StageKey& key, std::string_view name) {
    if (!name.starts_with(kPrefix)) {
        return std::nullopt;
    }
    name.remove_prefix(kPrefix.size());
    // <masked pid: 8 hex>-<nonce: 16 hex>-<tag: 16 hex>
    if (name.size() != 42 || name[8] != '-' || name[25] != '-') {
        return std::nullopt;
    }
    const auto masked = hex_number(name.substr(0, 8), 8);
    const auto nonce = hex_number(name.substr(9, 16), 16);
    const auto claimed = hex_number(name.substr(26, 16), 16);
    if (!masked || !nonce || !claimed) {
        return std::nullopt;
    }
    const auto mask = pid_mask(key, *nonce);
    if (!mask) {
        return std::nullopt;
    }
    const auto pid = static_cast<std::uint32_t>(*masked) ^ *mask;
    if (pid == 0 || pid > INT32_MAX || key.tag(static_cast<pid_t>(pid), *nonce) != claimed) {
        return std::nullopt;
    }
    return static_cast<pid_t>(pid);
}

int sweep_leftovers(const StageKey& key, int dir_fd, std::string_view own) {
    const runtime::UniqueFd listing{::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
    if (!listing) {
        return 0;
    }
    int removed = 0;
    alignas(8) char buffer[8192];
    for (;;) {
        const auto n = ::syscall(SYS_getdents64, listing.get(), buffer, sizeof buffer);
        if (n <= 0) {
            break;
        }
        for (long at = 0; at < n;) {
            struct Entry {
                std::uint64_t ino;
                std::int64_t off;
                unsigned short reclen;
                unsigned char type;
                char name[1];
            };
            const auto* entry = reinterpret_cast<const Entry*>(buffer + at);
            at += entry->reclen;
            const std::string_view name(entry->name);
            if (name == own) {
                continue;
            }
            const auto writer = staged_by(key, name);
            if (!writer || !writer_gone(*writer)) {
                continue;
            }
            struct stat st {};
            // By name in the directory already resolved, without following: a link or anything
            // but a regular file of that name is never ours.
            if (::fstatat(dir_fd, entry->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(st.st_mode) && ::unlinkat(dir_fd, entry->name, 0) == 0) {
                ++removed;
            }
        }
    }
    return removed;
}

}  // namespace maf_sandbox::emulator::staging
