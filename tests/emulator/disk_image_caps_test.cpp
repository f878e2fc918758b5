// The emulator's disk images import through the runtime's ImageStore, under the caps of
// `acas-emulator serve --image-*` (docs/SECURITY.md, "Images as an attack surface"): a refusal
// names the serve flag, the byte, entry and depth caps fail the image for good, and the
// free-space floor counts as a full disk (retried while space may return).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine.hpp"
#include "maf_sandbox/emulator/emulator.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "out_of_space.hpp"
#include "test_dirs.hpp"

namespace maf_sandbox::emulator {
namespace {

using ::maf_sandbox::testing::TempDir;

// A rootfs tarball holding one file of `size` bytes.
std::filesystem::path tarball(const TempDir& dir, const std::string& name, std::size_t size) {
    const auto root = dir.path() / (name + ".d");
    std::filesystem::create_directories(root / "etc");
    std::ofstream(root / "etc" / "payload") << std::string(size, 'p');
    const auto out = dir.path() / (name + ".tar");
    EXPECT_EQ(
        std::system(fmt::format("tar -C '{}' -cf '{}' .", root.string(), out.string()).c_str()), 0);
    return out;
}

TEST(EmulatorDiskImageCaps, AnArchiveOverTheServeByteCapIsRefusedNamingTheServeFlag) {
    TempDir dir;
    auto limits = emulator_image_limits();
    limits.max_bytes = 1 << 20;
    const auto engine = make_runtime_engine(dir.path() / "runtime", limits);
    // Control: an image under the cap imports.
    engine->import_image(tarball(dir, "small", 256 << 10), "acas-img-small:latest");
    EXPECT_TRUE(engine->has_image("acas-img-small:latest"));
    try {
        engine->import_image(tarball(dir, "big", 4 << 20), "acas-img-big:latest");
        FAIL() << "the archive over the cap imported";
    } catch (const runtime::ImageImportLimitExceeded& e) {
        EXPECT_EQ(e.cap(), "bytes");
        EXPECT_NE(std::string(e.what()).find("acas-emulator serve --image-max-bytes"),
                  std::string::npos)
            << e.what();
        EXPECT_FALSE(out_of_space(e));  // refused for good, not retried
    }
    EXPECT_FALSE(engine->has_image("acas-img-big:latest"));
}

TEST(EmulatorDiskImageCaps, TheFreeSpaceFloorCountsAsAFullDiskAndTheOtherCapsDoNot) {
    const runtime::ImageImportLimitExceeded floor("no room", "free space", 5, 1, "--x");
    const runtime::ImageImportLimitExceeded entries("too many", "entries", 5, 6, "--y");
    EXPECT_TRUE(out_of_space(floor));
    EXPECT_FALSE(out_of_space(entries));
}

}  // namespace
}  // namespace maf_sandbox::emulator
