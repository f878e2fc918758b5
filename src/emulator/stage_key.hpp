// Internal: the secret of the emulator's state directory that tags the file plane's staged
// siblings (file_plane_staging.hpp), so a later run recognises what an earlier one left behind
// and no guest can make up a name that passes for one.
//
// The tag is HMAC-SHA256, truncated, through OpenSSL's EVP_MAC. The purpose is a keyed name: a
// guest sees tags (the staged file of a write in flight is in its directory) and may try to forge
// one, so it needs a MAC whose forgery resistance is the standard's, not a hash-table PRF.
// Truncated to 64 bits: a forgery is an online guess per write request, and a guessed name only
// gets the guest's own file removed.
//
// tag() runs inside the guest-authority child too (guest_authority.hpp): it never fetches an
// algorithm (a lock on OpenSSL's provider store), it copies a context keyed here in the emulator.
#pragma once

#include <openssl/types.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>

namespace maf_sandbox::emulator::staging {

// The key file, in the emulator's state directory.
inline constexpr const char* kStageKeyFile = "stage.key";
// Bytes of secret a new key file holds, and the shortest one accepted (earlier versions wrote
// 16-byte keys).
inline constexpr std::size_t kStageKeyBytes = 32;
inline constexpr std::size_t kMinStageKeyBytes = 16;

class StageKey {
  public:
    // Reads stage.key in the directory `dir_fd` (the emulator's checked state directory, shown in
    // messages as `shown_dir`), or creates it (0600, fresh random bytes from the kernel) when
    // there is none, with O_EXCL semantics: a file another emulator made first is read, never
    // replaced. Opens it relative to `dir_fd` without following a link. Throws SystemError when it
    // is a link (ELOOP), not a regular file or of a size no key has (EINVAL), owned by another
    // user or open to anyone else (a mode looser than 0600: EPERM), or when no random key can be
    // made (never a weaker key in its place).
    static StageKey load(int dir_fd, const std::filesystem::path& shown_dir);

    // A key of these bytes (at least kMinStageKeyBytes; throws InvalidArgument otherwise).
    explicit StageKey(std::span<const std::uint8_t> secret);

    // The tag of a writer `pid` and `nonce`; nullopt when OpenSSL could not compute it (no memory).
    std::optional<std::uint64_t> tag(pid_t pid, std::uint64_t nonce) const;

  private:
    struct FreeContext {
        void operator()(EVP_MAC_CTX* context) const noexcept;
    };
    std::unique_ptr<EVP_MAC_CTX, FreeContext> keyed_;
};

}  // namespace maf_sandbox::emulator::staging
