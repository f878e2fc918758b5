// One acas-emulator process on loopback (plain HTTP, so tests can also speak raw HTTP to it),
// SIGTERM and reaped on destruction, with its state directory removed.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

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

class EmulatorProcess {
  public:
    // Plain HTTP by default; with `tls`, a self-signed certificate whose CA is ca_file().
    explicit EmulatorProcess(const std::filesystem::path& state, bool tls = false)
        : ca_file_(state / "ca.pem") {
        std::vector<std::string> args{
            ACAS_EMULATOR_PATH, "serve",   "--listen",       "127.0.0.1:0", "--state-dir",
            state.string(),     "--token", "badinput-token", "--alias",     "python-3.13=host"};
        args.emplace_back(tls ? "--self-signed" : "--plain-http");
        std::vector<char*> argv;
        for (auto& a : args) {
            argv.push_back(a.data());
        }
        argv.push_back(nullptr);
        int out[2];
        if (::pipe(out) != 0) {
            throw std::runtime_error("pipe failed");
        }
        const auto log = (state / "emulator.log").string();
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&actions, out[0]);
        posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0644);
        std::filesystem::create_directories(state);
        const int spawned = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        ::close(out[1]);
        if (spawned != 0) {
            ::close(out[0]);
            throw std::runtime_error("cannot start acas-emulator");
        }
        std::string line;
        char c = 0;
        while (::read(out[0], &c, 1) == 1 && c != '\n') {
            line.push_back(c);
        }
        ::close(out[0]);
        const std::string prefix = "listening on ";
        if (!line.starts_with(prefix)) {
            throw std::runtime_error("acas-emulator did not start: '" + line + "', log " + log);
        }
        base_url_ = line.substr(prefix.size());
        const auto colon = base_url_.rfind(':');
        port_ = static_cast<std::uint16_t>(std::stoi(base_url_.substr(colon + 1)));
    }
    ~EmulatorProcess() { stop(); }
    EmulatorProcess(const EmulatorProcess&) = delete;
    EmulatorProcess& operator=(const EmulatorProcess&) = delete;

    void stop() {
        if (pid_ > 0) {
            ::kill(pid_, SIGTERM);
            int status = 0;
            ::waitpid(pid_, &status, 0);
            pid_ = -1;
        }
    }
    // True while the process has not exited.
    bool alive() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
    const std::string& base_url() const { return base_url_; }
    std::uint16_t port() const { return port_; }
    const std::filesystem::path& ca_file() const { return ca_file_; }

  private:
    std::filesystem::path ca_file_;
    pid_t pid_ = -1;
    std::string base_url_;
    std::uint16_t port_ = 0;
};

}  // namespace maf_sandbox::badinput
