// The emulator file plane's staged-sibling names (emulator/file_plane_staging.hpp) on arbitrary
// bytes. A guest names files in its own directories, so any name, `.maf-stage-` prefix and all,
// may reach staged_by when a write sweeps leftovers.
//
// Properties, beyond not crashing:
// - a name staged_by accepts is exactly the name staged_name makes for the writer it returns and
//   the nonce in it (so no other name is ever treated as a leftover and removed);
// - every name staged_name makes is accepted, with its writer's pid;
// - a name made under another key is never accepted.
#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cstdint>
#include <string>

#include "file_plane_staging.hpp"
#include "fuzz_check.hpp"
#include "stage_key.hpp"

namespace maf_sandbox::emulator::staging {
namespace {

using fuzz::require;

const StageKey& key(std::uint8_t seed) {
    static const auto keys = [] {
        std::array<std::array<std::uint8_t, kStageKeyBytes>, 2> secrets{};
        for (std::size_t k = 0; k < secrets.size(); ++k) {
            for (std::size_t i = 0; i < kStageKeyBytes; ++i) {
                secrets[k][i] = static_cast<std::uint8_t>(i * 13 + k * 101 + 7);
            }
        }
        return std::array<StageKey, 2>{StageKey(secrets[0]), StageKey(secrets[1])};
    }();
    return keys[seed % 2];
}

void check(FuzzedDataProvider& in) {
    const auto name = in.ConsumeRandomLengthString(96);
    if (const auto pid = staged_by(key(0), name)) {
        require(*pid > 0, "an accepted writer pid is positive", name);
        // .maf-stage-<8 hex>-<16 hex nonce>-<16 hex tag>
        require(name.size() == 53, "an accepted name has the staged shape", name);
        const auto nonce = std::stoull(name.substr(20, 16), nullptr, 16);
        require(staged_name(key(0), *pid, nonce) == name,
                "an accepted name is the one made for its writer and nonce", name);
    }
    const auto pid = in.ConsumeIntegralInRange<pid_t>(1, INT32_MAX);
    const auto nonce = in.ConsumeIntegral<std::uint64_t>();
    const auto made = staged_name(key(0), pid, nonce);
    require(staged_by(key(0), made) == std::optional<pid_t>(pid), "a made name is accepted", made);
    require(!staged_by(key(1), made).has_value(), "another key's name is refused", made);
    // Any one-character change of a made name is refused or is the same name.
    if (!made.empty()) {
        auto changed = made;
        const auto at = in.ConsumeIntegralInRange<std::size_t>(0, changed.size() - 1);
        changed[at] = static_cast<char>(in.ConsumeIntegral<std::uint8_t>());
        if (changed != made) {
            require(!staged_by(key(0), changed).has_value(), "an altered name is refused", changed);
        }
    }
}

}  // namespace
}  // namespace maf_sandbox::emulator::staging

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    maf_sandbox::emulator::staging::check(in);
    return 0;
}
