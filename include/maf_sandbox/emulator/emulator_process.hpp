// One `acas-emulator serve` child process on loopback, for the tests and benchmarks that talk to
// a real emulator: started with the given arguments, ready once it has printed its first line
// (`listening on <base url>`), SIGTERMed and reaped on destruction. The one launcher every
// fixture and bench uses, so the start-up handshake is written once.
//
// The emulator's sandboxes outlive it: delete them through the API before this object goes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace maf_sandbox::emulator {

struct EmulatorLaunch {
    std::filesystem::path executable;  // the acas-emulator binary
    std::filesystem::path state_dir;   // --state-dir; created when missing
    // After `serve --listen 127.0.0.1:0 --state-dir <state_dir>`: "--self-signed" or
    // "--plain-http", "--token", "--alias", fault options...
    std::vector<std::string> args;
    // The child's stderr (its log); empty: <state_dir>/emulator.log.
    std::filesystem::path log_file;
    std::chrono::milliseconds start_timeout{30000};
};

class EmulatorProcess {
  public:
    // Starts the emulator and waits for its first line. Throws SystemError when it cannot be
    // started, Error (naming the log) when it exits or says something else first, Timeout when it
    // says nothing within start_timeout; the child is reaped on every failure.
    explicit EmulatorProcess(EmulatorLaunch launch);
    ~EmulatorProcess();
    EmulatorProcess(const EmulatorProcess&) = delete;
    EmulatorProcess& operator=(const EmulatorProcess&) = delete;

    // SIGTERM and wait; returns the wait status (idempotent: later calls return the same).
    int terminate();
    // True while the process has not exited.
    bool alive() const;

    const std::string& base_url() const { return base_url_; }  // https://127.0.0.1:PORT
    const std::string& first_line() const { return first_line_; }
    std::uint16_t port() const { return port_; }
    pid_t pid() const { return pid_; }
    // The self-signed CA the emulator writes (with --self-signed or no TLS option).
    std::filesystem::path ca_file() const { return state_dir_ / "ca.pem"; }
    const std::filesystem::path& log() const { return log_; }
    const std::filesystem::path& state_dir() const { return state_dir_; }

  private:
    std::filesystem::path state_dir_;
    std::filesystem::path log_;
    pid_t pid_ = -1;
    int status_ = -1;
    // The read end of the child's stdout, kept open so a later write there cannot SIGPIPE it.
    int stdout_fd_ = -1;
    std::string first_line_;
    std::string base_url_;
    std::uint16_t port_ = 0;
};

// `acas-emulator` next to the running executable (build and install trees keep them together),
// if it is there and executable.
std::optional<std::filesystem::path> emulator_next_to_self();

}  // namespace maf_sandbox::emulator
