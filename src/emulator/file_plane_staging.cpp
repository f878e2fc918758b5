#include "file_plane_staging.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace maf_sandbox::emulator::staging {

namespace {

constexpr std::string_view kPrefix = ".maf-stage-";

Key random_key() {
    Key k{};
    if (::syscall(SYS_getrandom, k.data(), k.size(), 0) != static_cast<long>(k.size())) {
        // Only secrecy across restarts is lost: the clock and pid still make it unpredictable
        // enough for a process whose key is never written anywhere.
        const auto mix = static_cast<std::uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ULL ^
                         static_cast<std::uint64_t>(::time(nullptr));
        std::memcpy(k.data(), &mix, sizeof mix);
    }
    return k;
}

// Initialised with the program, not on first use: the guest-authority child must never run a
// guarded static's first-use initialisation (it takes a lock).
Key g_key = random_key();

Key& current() {
    return g_key;
}

std::uint64_t load64(const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) {
        v = (v << 8) | p[i];
    }
    return v;
}

std::uint64_t rotl(std::uint64_t x, int b) {
    return (x << b) | (x >> (64 - b));
}

std::optional<std::uint64_t> hex64(std::string_view text) {
    if (text.size() != 16) {
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

std::uint64_t tag(const Key& key, pid_t pid, std::uint64_t nonce) {
    std::uint8_t message[16];
    const auto wide = static_cast<std::uint64_t>(pid);
    for (int i = 0; i < 8; ++i) {
        message[i] = static_cast<std::uint8_t>(wide >> (8 * i));
        message[8 + i] = static_cast<std::uint8_t>(nonce >> (8 * i));
    }
    return siphash24(key, message, sizeof message);
}

// Gone for certain: a live process, or one this task may not signal, exists.
bool writer_gone(pid_t pid) {
    return ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

void load_key(const std::filesystem::path& dir) {
    const auto file = dir / "stage.key";
    Key k{};
    int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        const auto n = ::read(fd, k.data(), k.size());
        ::close(fd);
        if (n == static_cast<ssize_t>(k.size())) {
            current() = k;
        }
        return;  // a short key file keeps the process's random key
    }
    k = random_key();
    const auto temporary = file.string() + ".tmp";
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        return;
    }
    const bool written =
        ::write(fd, k.data(), k.size()) == static_cast<ssize_t>(k.size()) && ::fsync(fd) == 0;
    ::close(fd);
    if (written && ::rename(temporary.c_str(), file.c_str()) == 0) {
        current() = k;
    } else {
        ::unlink(temporary.c_str());
    }
}

const Key& key() {
    return current();
}

std::uint64_t siphash24(const Key& key, const std::uint8_t* data, std::size_t size) {
    const std::uint64_t k0 = load64(key.data());
    const std::uint64_t k1 = load64(key.data() + 8);
    std::uint64_t v0 = 0x736f6d6570736575ULL ^ k0;
    std::uint64_t v1 = 0x646f72616e646f6dULL ^ k1;
    std::uint64_t v2 = 0x6c7967656e657261ULL ^ k0;
    std::uint64_t v3 = 0x7465646279746573ULL ^ k1;
    const auto round = [&] {
        v0 += v1;
        v1 = rotl(v1, 13);
        v1 ^= v0;
        v0 = rotl(v0, 32);
        v2 += v3;
        v3 = rotl(v3, 16);
        v3 ^= v2;
        v0 += v3;
        v3 = rotl(v3, 21);
        v3 ^= v0;
        v2 += v1;
        v1 = rotl(v1, 17);
        v1 ^= v2;
        v2 = rotl(v2, 32);
    };
    const std::size_t whole = size - size % 8;
    for (std::size_t i = 0; i < whole; i += 8) {
        const auto m = load64(data + i);
        v3 ^= m;
        round();
        round();
        v0 ^= m;
    }
    std::uint64_t last = static_cast<std::uint64_t>(size) << 56;
    for (std::size_t i = 0; i < size % 8; ++i) {
        last |= static_cast<std::uint64_t>(data[whole + i]) << (8 * i);
    }
    v3 ^= last;
    round();
    round();
    v0 ^= last;
    v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) {
        round();
    }
    return v0 ^ v1 ^ v2 ^ v3;
}

std::string staged_name(const Key& key, pid_t pid, std::uint64_t nonce) {
    return fmt::format("{}{}-{:016x}-{:016x}", kPrefix, pid, nonce, tag(key, pid, nonce));
}

std::optional<pid_t> staged_by(const Key& key, std::string_view name) {
    if (!name.starts_with(kPrefix)) {
        return std::nullopt;
    }
    name.remove_prefix(kPrefix.size());
    const auto dash = name.find('-');
    if (dash == 0 || dash == std::string_view::npos || dash > 10 || name.size() != dash + 34 ||
        name[dash + 17] != '-') {
        return std::nullopt;
    }
    std::int64_t pid = 0;
    for (char c : name.substr(0, dash)) {
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        pid = pid * 10 + (c - '0');
    }
    const auto nonce = hex64(name.substr(dash + 1, 16));
    const auto claimed = hex64(name.substr(dash + 18, 16));
    if (pid <= 0 || pid > INT32_MAX || !nonce || !claimed ||
        *claimed != tag(key, static_cast<pid_t>(pid), *nonce)) {
        return std::nullopt;
    }
    return static_cast<pid_t>(pid);
}

int sweep_leftovers(int dir_fd, std::string_view own) {
    const int listing = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (listing < 0) {
        return 0;
    }
    int removed = 0;
    alignas(8) char buffer[8192];
    for (;;) {
        const auto n = ::syscall(SYS_getdents64, listing, buffer, sizeof buffer);
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
            const auto writer = staged_by(key(), name);
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
    ::close(listing);
    return removed;
}

}  // namespace maf_sandbox::emulator::staging
