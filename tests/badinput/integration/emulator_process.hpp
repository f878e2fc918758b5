// One acas-emulator process on loopback (plain HTTP, so tests can also speak raw HTTP to it),
// SIGTERM and reaped on destruction, with its state directory removed.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "maf_sandbox/emulator/emulator_process.hpp"
#include "test_dirs.hpp"

namespace maf_sandbox::badinput {

using TempDir = ::maf_sandbox::testing::TempDir;

// The shared launcher with this battery's token and alias, plain HTTP unless `tls`.
class EmulatorProcess : public emulator::EmulatorProcess {
  public:
    // Plain HTTP by default; with `tls`, a self-signed certificate whose CA is ca_file().
    explicit EmulatorProcess(const std::filesystem::path& state, bool tls = false)
        : emulator::EmulatorProcess(
              emulator::EmulatorLaunch{ACAS_EMULATOR_PATH,
                                       state,
                                       {"--token", "badinput-token", "--alias", "python-3.13=host",
                                        tls ? "--self-signed" : "--plain-http"},
                                       state / "emulator.log",
                                       std::chrono::seconds(30)}) {}
    void stop() { terminate(); }
};

}  // namespace maf_sandbox::badinput
