// The file plane's staging key (src/emulator/stage_key.hpp): made once per state directory and
// read back by every later run, its tag is HMAC-SHA256 under it, and a key file that is a link,
// not a regular file, another user's, open to others or of no key's size is refused rather than
// replaced or used.
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "file_plane_staging.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "stage_key.hpp"
#include "test_dirs.hpp"

namespace maf_sandbox::emulator::staging {
namespace {

using maf_sandbox::testing::TempDir;

runtime::UniqueFd open_dir(const TempDir& dir) {
    runtime::UniqueFd fd{::open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
    EXPECT_TRUE(fd) << dir.path();
    return fd;
}

std::string key_bytes(const TempDir& dir) {
    std::ifstream in(dir.path() / kStageKeyFile, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
}

// The errno of load()'s refusal, or 0 when it loaded.
int refusal_of(const TempDir& dir) {
    const auto fd = open_dir(dir);
    try {
        (void)StageKey::load(fd.get(), dir.path());
        return 0;
    } catch (const SystemError& e) {
        return e.error_number();
    }
}

TEST(StageKey, AFreshDirectoryGetsAPrivateRandomKeyThatTheNextLoadReadsBack) {
    TempDir dir;
    const auto fd = open_dir(dir);
    const auto first = StageKey::load(fd.get(), dir.path());
    struct stat st {};
    ASSERT_EQ(::stat((dir.path() / kStageKeyFile).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(st.st_uid, ::geteuid());
    const auto secret = key_bytes(dir);
    ASSERT_EQ(secret.size(), kStageKeyBytes);
    EXPECT_NE(secret, std::string(kStageKeyBytes, '\0'));
    // Nothing but the key is left in the directory (the staged sibling went).
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
    const auto second = StageKey::load(fd.get(), dir.path());
    EXPECT_EQ(key_bytes(dir), secret) << "a second load replaced the key";
    EXPECT_EQ(first.tag(4242, 7), second.tag(4242, 7));
    EXPECT_EQ(staged_by(second, staged_name(first, 4242, 7)), std::optional<pid_t>(4242));
}

TEST(StageKey, TheTagIsTheLeadingBytesOfHmacSha256OverThePidAndNonce) {
    std::array<std::uint8_t, kStageKeyBytes> secret{};
    for (std::size_t i = 0; i < secret.size(); ++i) {
        secret[i] = static_cast<std::uint8_t>(i * 7 + 1);
    }
    const StageKey key(secret);
    const pid_t pid = 4242;
    const std::uint64_t nonce = 0x0102030405060708ULL;
    std::array<std::uint8_t, 16> message{};
    for (int i = 0; i < 8; ++i) {
        message[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(pid) >> (8 * i));
        message[8 + i] = static_cast<std::uint8_t>(nonce >> (8 * i));
    }
    std::array<unsigned char, EVP_MAX_MD_SIZE> expected{};
    unsigned length = 0;
    ASSERT_NE(HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), message.data(),
                   message.size(), expected.data(), &length),
              nullptr);
    ASSERT_EQ(length, 32u);
    std::uint64_t leading = 0;
    for (int i = 0; i < 8; ++i) {
        leading = (leading << 8) | expected[i];
    }
    EXPECT_EQ(key.tag(pid, nonce), std::optional<std::uint64_t>(leading));
    auto other_secret = secret;
    other_secret[0] ^= 1;
    const StageKey other(other_secret);
    const auto name = staged_name(key, pid, nonce);
    // The writer is a host pid, and the guest sees the name: it carries the pid masked.
    EXPECT_EQ(name.find(std::to_string(pid)), std::string::npos) << name;
    EXPECT_EQ(name.find(fmt::format("{:08x}", pid)), std::string::npos) << name;
    EXPECT_EQ(staged_by(key, name), std::optional<pid_t>(pid));
    EXPECT_FALSE(staged_by(other, name).has_value()) << "another key's name verified";
    EXPECT_FALSE(staged_by(key, name.substr(0, name.size() - 1) + "x").has_value());
}

TEST(StageKey, AnEarlierVersionsSixteenByteKeyIsStillRead) {
    TempDir dir;
    const std::string secret(kMinStageKeyBytes, 'k');
    dir.write(kStageKeyFile, secret, 0600);
    const auto fd = open_dir(dir);
    const auto key = StageKey::load(fd.get(), dir.path());
    const StageKey same(
        std::span(reinterpret_cast<const std::uint8_t*>(secret.data()), secret.size()));
    EXPECT_EQ(key.tag(1, 2), same.tag(1, 2));
    EXPECT_EQ(key_bytes(dir), secret);
}

TEST(StageKey, AKeyFileThatIsALinkIsRefusedAndTheLinkKept) {
    TempDir dir;
    const auto target = dir.write("elsewhere", std::string(kStageKeyBytes, 'x'), 0600);
    std::filesystem::create_symlink(target, dir.path() / kStageKeyFile);
    EXPECT_EQ(refusal_of(dir), ELOOP);
    EXPECT_TRUE(std::filesystem::is_symlink(dir.path() / kStageKeyFile));
}

TEST(StageKey, AKeyFileThatIsNotARegularFileIsRefused) {
    TempDir dir;
    ASSERT_EQ(::mkfifo((dir.path() / kStageKeyFile).c_str(), 0600), 0);
    EXPECT_EQ(refusal_of(dir), EINVAL);
}

TEST(StageKey, AKeyFileOwnedByAnotherUserIsRefused) {
    if (::geteuid() != 0) {
        GTEST_SKIP() << "giving a file to another user needs root";
    }
    TempDir dir;
    const auto file = dir.write(kStageKeyFile, std::string(kStageKeyBytes, 'x'), 0600);
    ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
    EXPECT_EQ(refusal_of(dir), EPERM);
}

TEST(StageKey, AKeyFileOthersMayReadIsRefusedAndNotRewritten) {
    TempDir dir;
    const std::string secret(kStageKeyBytes, 'x');
    dir.write(kStageKeyFile, secret, 0640);
    EXPECT_EQ(refusal_of(dir), EPERM);
    EXPECT_EQ(key_bytes(dir), secret);
    struct stat st {};
    ASSERT_EQ(::stat((dir.path() / kStageKeyFile).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u) << "a refused key file was changed";
}

TEST(StageKey, AKeyFileOfNoKeysSizeIsRefused) {
    TempDir dir;
    dir.write(kStageKeyFile, std::string(kMinStageKeyBytes - 1, 'x'), 0600);
    EXPECT_EQ(refusal_of(dir), EINVAL);
    TempDir big;
    big.write(kStageKeyFile, std::string(4096, 'x'), 0600);
    EXPECT_EQ(refusal_of(big), EINVAL);
}

}  // namespace
}  // namespace maf_sandbox::emulator::staging
