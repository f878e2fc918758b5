// When the emulator's own disk is full: a launch or a disk-image import refused for want of
// space is tried again this often, for at most this long, staying Pending, before it fails.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>

namespace maf_sandbox::emulator {

constexpr std::uint64_t kLaunchRetryMs = 1000;
constexpr auto kLaunchRetryWindow = std::chrono::minutes(5);

// Whether `e` reports a full disk or an exhausted quota: a SystemError, FileError (the root
// builder's) or filesystem_error with that errno, or an Error from deeper in the runtime that
// quotes the errno's text.
bool out_of_space(const std::exception& e);

}  // namespace maf_sandbox::emulator
