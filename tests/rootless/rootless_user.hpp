// A throwaway unprivileged account for the rootless battery: made with useradd (with or without
// subordinate ids), its home a private temporary directory, and every account file the tools
// touch (/etc/passwd, shadow, group, gshadow, subuid, subgid) restored byte for byte afterwards.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace maf_sandbox::testing {

struct Outcome {
    int exit_code = -1;  // -1: killed at the deadline
    std::string out;
    std::string err;
};

class RootlessUser {
  public:
    // `subordinate_ids`: give the user a 65536-id range in /etc/subuid and /etc/subgid.
    RootlessUser(std::string name, bool subordinate_ids);
    ~RootlessUser();
    RootlessUser(const RootlessUser&) = delete;
    RootlessUser& operator=(const RootlessUser&) = delete;

    uid_t uid() const { return uid_; }
    const std::filesystem::path& home() const { return home_; }

    // Runs `argv` as the user (no supplementary groups, HOME and XDG_STATE_HOME in its home),
    // stdout and stderr captured, killed after `limit`.
    Outcome run(const std::vector<std::string>& argv,
                std::chrono::seconds limit = std::chrono::seconds(120)) const;
    // The same with XDG_STATE_HOME at `state_home` instead.
    Outcome run_with_state_home(const std::vector<std::string>& argv,
                                const std::filesystem::path& state_home) const;

    // The pids of the user's processes still running (zombies left out).
    std::vector<pid_t> live_processes() const;

  private:
    std::string name_;
    uid_t uid_ = 0;
    gid_t gid_ = 0;
    std::filesystem::path home_;
    std::map<std::string, std::string> saved_;  // account file -> its content before
};

// Runs `argv` as this process (root), as RootlessUser::run does.
Outcome run_as_root(const std::vector<std::string>& argv,
                    std::chrono::seconds limit = std::chrono::seconds(120));

}  // namespace maf_sandbox::testing
