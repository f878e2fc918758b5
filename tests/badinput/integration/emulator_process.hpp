// One acas-emulator process on loopback (plain HTTP, so tests can also speak raw HTTP to it),
// SIGTERM and reaped on destruction, with its state directory removed.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "maf_sandbox/emulator/emulator_process.hpp"

namespace maf_sandbox::badinput {

class TempDir {
  public:
    TempDir() {
        std::string pattern = "/tmp/maf-badinput-XXXXXX";
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed");
        }
        path_ = pattern;
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
};

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
