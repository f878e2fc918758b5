#include "owner_watch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/wire/owner.hpp"
#include "maf_sandbox/runtime/wire/record_cgroups.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

namespace {

// A pidfd on the owner, or an invalid fd when the owner is gone. Opened before the start time is
// read, so that a pid reused after the check can never be the one the fd names.
UniqueFd open_owner(const SandboxOwner& owner) {
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, owner.pid, 0)));
    if (!pidfd || !owner_alive(owner)) {
        return UniqueFd();
    }
    ::fcntl(pidfd.get(), F_SETFD, FD_CLOEXEC);
    return pidfd;
}

// <state>/sandboxes/<id> -> <state>
fs::path state_dir_of(const SupervisorConfig& config) {
    return config.sandbox_dir.parent_path().parent_path();
}

// The owner ended: everything of the sandbox goes, as gc would reclaim it. A record not yet
// written (the owner died while creating) still has cgroups named for the id: they go too.
// A cgroup can stay busy for a moment after its last process died, and a host under load makes
// that moment longer: a few tries, then gc's turn (the record names an owner that is gone).
[[noreturn]] void dispose(const SupervisorConfig& config) {
    constexpr int kAttempts = 10;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
        try {
            Registry registry(state_dir_of(config));
            SandboxRecord record;
            record.id = config.id;
            if (auto stored = registry.get(config.id)) {
                record = std::move(*stored);
            }
            remove_recorded_cgroups(record);
            // Nothing of the sandbox runs any more: its host ids are free for the next one.
            release_recorded_ids(record);
            registry.remove(config.id);
            std::_Exit(0);
        } catch (const std::exception&) {
            ::usleep(200 * 1000);
        }
    }
    std::_Exit(1);
}

// True when the life pipe reports EOF within `timeout_ms` (-1: forever) or `owner` (when not -1)
// becomes readable; `owner_ended` says which.
bool wait_for(int life, int owner, int timeout_ms, bool& owner_ended) {
    pollfd fds[2] = {{life, POLLIN, 0}, {owner, POLLIN, 0}};
    const nfds_t count = owner >= 0 ? 2 : 1;
    for (;;) {
        const int ready = ::poll(fds, count, timeout_ms);
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready <= 0) {
            return false;
        }
        // The sandbox's end wins when both arrive together: it was disposed by its owner, whose
        // exit followed.
        const bool life_ended = (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
        owner_ended =
            !life_ended && count == 2 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
        return true;
    }
}

[[noreturn]] void watch(const SupervisorConfig& config, UniqueFd life, UniqueFd owner) {
    // Nothing of the launch's: the ready pipe and the cgroup pipe must reach EOF when the
    // supervisor's host-side half exits, whatever the watcher does.
    const int keep_life = life.get();
    const int keep_owner = owner.valid() ? owner.get() : -1;
    for (int fd = 3; fd < 64; ++fd) {
        if (fd != keep_life && fd != keep_owner) {
            ::close(fd);
        }
    }
    ::syscall(SYS_close_range, 64, ~0u, 0);
    ::prctl(PR_SET_NAME, "maf-sbx-owner", 0, 0, 0);
    bool owner_ended = false;
    while (!owner.valid()) {
        // A pooled sandbox: wait until a taker records its owner.
        if (wait_for(life.get(), -1, static_cast<int>(kOwnerPollInterval.count()), owner_ended)) {
            std::_Exit(0);  // the sandbox ended first
        }
        std::optional<SandboxRecord> record;
        try {
            record = Registry(state_dir_of(config)).get(config.id);
        } catch (const std::exception&) {
        }
        if (!record) {
            continue;  // not written yet, or being replaced
        }
        if (const auto recorded = recorded_owner(*record)) {
            owner = open_owner(*recorded);
            if (!owner) {
                dispose(config);  // it ended before we could watch it
            }
        } else if (record->labels.count(config.owner_pending_label) == 0) {
            std::_Exit(0);  // taken without an owner (a conversation's sandbox): it may outlive
        }
    }
    if (wait_for(life.get(), owner.get(), -1, owner_ended) && owner_ended) {
        dispose(config);
    }
    std::_Exit(0);
}

}  // namespace

UniqueFd start_owner_watch(const SupervisorConfig& config) {
    if (!config.owner && config.owner_pending_label.empty()) {
        return UniqueFd();
    }
    UniqueFd owner;
    if (config.owner) {
        owner = open_owner(*config.owner);
        if (!owner) {
            throw SystemError(ESRCH,
                              fmt::format("watching the owner (pid {}) of one-shot sandbox {}: it "
                                          "has already ended",
                                          config.owner->pid, config.id),
                              "nothing to do: the sandbox is not started for an ended owner");
        }
    }
    int life[2];
    if (::pipe2(life, O_CLOEXEC) != 0) {
        throw SystemError(errno, "creating the owner watch's life pipe");
    }
    UniqueFd life_read(life[0]);
    UniqueFd life_write(life[1]);
    const pid_t watcher = ::fork();
    if (watcher < 0) {
        throw SystemError(errno, fmt::format("starting the owner watch of sandbox {}", config.id),
                          "the host is out of processes or memory");
    }
    if (watcher == 0) {
        life_write.reset();
        watch(config, std::move(life_read), std::move(owner));
    }
    return life_write;
}

}  // namespace maf_sandbox::runtime
