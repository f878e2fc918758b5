// The file plane's staging key: its file in the emulator's state directory, and the keyed tag.
#include "stage_key.hpp"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <array>
#include <cerrno>
#include <string>
#include <vector>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::emulator::staging {
namespace {

using runtime::UniqueFd;

// Anything longer is not a key this emulator wrote.
constexpr std::size_t kMaxStageKeyBytes = 64;

std::string remedy(const std::string& shown) {
    return fmt::format(
        "it must be a regular file of the emulator's user with mode 0600; remove {} and the "
        "emulator makes a new one (staged files an earlier run left are then kept)",
        shown);
}

// The key of an existing file, once the file has passed every check.
std::vector<std::uint8_t> read_checked(int fd, const std::string& shown) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        throw SystemError(errno, fmt::format("inspecting the file-plane key {}", shown));
    }
    if (!S_ISREG(st.st_mode)) {
        throw SystemError(EINVAL, fmt::format("the file-plane key {} is not a regular file", shown),
                          remedy(shown));
    }
    if (st.st_uid != ::geteuid() || (st.st_mode & 07777 & ~mode_t{0600}) != 0) {
        throw SystemError(EPERM,
                          fmt::format("the file-plane key {} is owned by uid {} with mode {:o}",
                                      shown, st.st_uid, st.st_mode & 07777),
                          remedy(shown));
    }
    const auto size = static_cast<std::size_t>(st.st_size);
    if (size < kMinStageKeyBytes || size > kMaxStageKeyBytes) {
        throw SystemError(
            EINVAL,
            fmt::format("the file-plane key {} holds {} bytes, not a key", shown, st.st_size),
            remedy(shown));
    }
    std::vector<std::uint8_t> secret(size);
    std::size_t filled = 0;
    while (filled < size) {
        const ssize_t got = ::read(fd, secret.data() + filled, size - filled);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            throw SystemError(got < 0 ? errno : EINVAL,
                              fmt::format("reading the file-plane key {}", shown), remedy(shown));
        }
        filled += static_cast<std::size_t>(got);
    }
    return secret;
}

// Makes the key file: the bytes go to a fresh sibling first and are linked in under the key's
// name, so no reader ever sees a partial key and an existing file is never replaced. Returns
// nullopt when another emulator linked its key first.
std::optional<std::vector<std::uint8_t>> create(int dir_fd, const std::string& shown) {
    std::vector<std::uint8_t> secret(kStageKeyBytes);
    fill_random(std::span(secret.data(), secret.size()));
    const auto temporary = fmt::format("{}.{}.tmp", kStageKeyFile, random_hex(8));
    const UniqueFd fd{::openat(dir_fd, temporary.c_str(),
                               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)};
    if (!fd) {
        throw SystemError(errno, fmt::format("creating the file-plane key {}", shown),
                          "check free space and permissions on the state directory");
    }
    struct Sibling {
        int dir;
        const std::string& name;
        ~Sibling() { ::unlinkat(dir, name.c_str(), 0); }
    } sibling{dir_fd, temporary};
    std::size_t written = 0;
    while (written < secret.size()) {
        const ssize_t put = ::write(fd.get(), secret.data() + written, secret.size() - written);
        if (put < 0 && errno == EINTR) {
            continue;
        }
        if (put <= 0) {
            throw SystemError(put < 0 ? errno : EIO,
                              fmt::format("writing the file-plane key {}", shown),
                              "check free space on the state directory");
        }
        written += static_cast<std::size_t>(put);
    }
    if (::fsync(fd.get()) != 0) {
        throw SystemError(errno, fmt::format("writing the file-plane key {}", shown),
                          "check free space on the state directory");
    }
    if (::linkat(dir_fd, temporary.c_str(), dir_fd, kStageKeyFile, 0) != 0) {
        if (errno == EEXIST) {
            return std::nullopt;
        }
        throw SystemError(errno, fmt::format("creating the file-plane key {}", shown),
                          "check permissions on the state directory");
    }
    ::fsync(dir_fd);
    return secret;
}

struct FreeMac {
    void operator()(EVP_MAC* mac) const noexcept { EVP_MAC_free(mac); }
};

}  // namespace

void StageKey::FreeContext::operator()(EVP_MAC_CTX* context) const noexcept {
    EVP_MAC_CTX_free(context);
}

StageKey StageKey::load(int dir_fd, const std::filesystem::path& shown_dir) {
    const auto shown = (shown_dir / kStageKeyFile).string();
    // Twice at most: a key another emulator linked in between our open and our link is read.
    for (int attempt = 0; attempt < 2; ++attempt) {
        // O_NONBLOCK: a FIFO of that name must be refused, not waited on.
        const UniqueFd fd{
            ::openat(dir_fd, kStageKeyFile, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
        if (fd) {
            return StageKey(read_checked(fd.get(), shown));
        }
        if (errno == ELOOP) {
            throw SystemError(ELOOP, fmt::format("the file-plane key {} is a link", shown),
                              remedy(shown));
        }
        if (errno != ENOENT) {
            throw SystemError(errno, fmt::format("opening the file-plane key {}", shown),
                              remedy(shown));
        }
        if (auto made = create(dir_fd, shown)) {
            return StageKey(*made);
        }
    }
    throw SystemError(EEXIST, fmt::format("the file-plane key {} keeps changing", shown),
                      "run one emulator per state directory");
}

StageKey::StageKey(std::span<const std::uint8_t> secret) {
    if (secret.size() < kMinStageKeyBytes) {
        throw InvalidArgument(fmt::format("a staging key needs at least {} bytes, not {}",
                                          kMinStageKeyBytes, secret.size()));
    }
    const std::unique_ptr<EVP_MAC, FreeMac> mac{EVP_MAC_fetch(nullptr, "HMAC", nullptr)};
    keyed_.reset(mac ? EVP_MAC_CTX_new(mac.get()) : nullptr);
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                 OSSL_PARAM_END};
    if (!keyed_ || EVP_MAC_init(keyed_.get(), secret.data(), secret.size(), params) != 1) {
        throw Error(
            "OpenSSL offers no HMAC-SHA256 (EVP_MAC \"HMAC\" with digest SHA256) for the "
            "file plane's staging key; check the OpenSSL installation");
    }
}

std::optional<std::uint64_t> StageKey::tag(pid_t pid, std::uint64_t nonce) const {
    // A copy of the keyed context: the original is shared by every worker's child at once, and
    // copying fetches nothing.
    const std::unique_ptr<EVP_MAC_CTX, FreeContext> context{EVP_MAC_CTX_dup(keyed_.get())};
    std::array<std::uint8_t, 16> message{};
    const auto wide = static_cast<std::uint64_t>(pid);
    for (int i = 0; i < 8; ++i) {
        message[i] = static_cast<std::uint8_t>(wide >> (8 * i));
        message[8 + i] = static_cast<std::uint8_t>(nonce >> (8 * i));
    }
    std::array<std::uint8_t, EVP_MAX_MD_SIZE> mac{};
    std::size_t length = 0;
    if (!context || EVP_MAC_update(context.get(), message.data(), message.size()) != 1 ||
        EVP_MAC_final(context.get(), mac.data(), &length, mac.size()) != 1 || length < 8) {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i) {
        value = (value << 8) | mac[i];
    }
    return value;
}

}  // namespace maf_sandbox::emulator::staging
