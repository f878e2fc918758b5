#include "full_cli.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace maf_sandbox::cli::lean {

std::string full_cli_path() {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        return "maf-sandbox-cli";
    }
    std::string path(self, static_cast<std::size_t>(n));
    return path.substr(0, path.rfind('/') + 1) + "maf-sandbox-cli";
}

void exec_full_cli(char** argv) {
    const auto path = full_cli_path();
    ::execve(path.c_str(), argv, environ);
    std::fprintf(stderr,
                 "error: cannot start the full command line %s (%s); reinstall maf-sandbox so "
                 "that maf-sandbox-cli sits next to maf-sandbox\n",
                 path.c_str(), std::strerror(errno));
}

bool spawn_full_cli_detached(const std::vector<std::string>& arguments) {
    const auto path = full_cli_path();
    std::vector<char*> argv{const_cast<char*>(path.c_str())};
    for (const auto& argument : arguments) {
        argv.push_back(const_cast<char*>(argument.c_str()));
    }
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
    for (const int fd : {0, 1, 2}) {
        posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_RDWR, 0);
    }
    // Nothing else of the caller's: a pipe it reads to EOF must not stay open in the filler.
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    // Its own session: a terminal's hang-up or the caller's process group signal never reaches it.
    // No signal blocked: the caller may be blocking SIGINT and SIGTERM for its own watcher.
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
    pid_t pid = 0;
    const int failed = posix_spawn(&pid, path.c_str(), &actions, &attributes, argv.data(), environ);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return failed == 0;
}

}  // namespace maf_sandbox::cli::lean
