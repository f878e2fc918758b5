#include "owner_watch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <vector>

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

// Pidfds on every owner `record` names that still runs (owner.hpp's co-owners).
std::vector<UniqueFd> open_live_owners(const SandboxRecord& record) {
    std::vector<UniqueFd> owners;
    for (const auto& owner : recorded_owners(record)) {
        if (auto pidfd = open_owner(owner)) {
            owners.push_back(std::move(pidfd));
        }
    }
    return owners;
}

// The sandbox's record, or nullopt when it is not written yet, is being replaced or cannot be
// read.
std::optional<SandboxRecord> read_record(const SupervisorConfig& config) {
    try {
        return Registry(state_dir_of(config)).get(config.id);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// True when the life pipe reports EOF within `timeout_ms` (-1: forever) or one of `owners`
// becomes readable (its process ended); `owner_ended` says which.
bool wait_for(int life, const std::vector<UniqueFd>& owners, int timeout_ms, bool& owner_ended) {
    std::vector<pollfd> fds{{life, POLLIN, 0}};
    for (const auto& owner : owners) {
        fds.push_back({owner.get(), POLLIN, 0});
    }
    for (;;) {
        const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready <= 0) {
            return false;
        }
        // The sandbox's end wins when both arrive together: it was disposed by its owner, whose
        // exit followed.
        const bool life_ended = (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
        owner_ended = false;
        for (std::size_t i = 1; i < fds.size() && !life_ended; ++i) {
            owner_ended = owner_ended || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
        }
        return true;
    }
}

// The watcher, in order: watch the owners it has (the creator's pidfd, or none yet); when one
// ends, read the record again and watch whichever co-owners still run; when none does, dispose.
// Without owners (a pooled sandbox, or one made for a conversation) it reads the record every
// poll interval until one is recorded: a pooled sandbox taken without one ends the watch, while a
// conversation's sandbox is watched for as long as it lives, since a later front end (an MCP
// server reusing it by key) may record itself.
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
    std::vector<UniqueFd> owners;
    if (owner) {
        owners.push_back(std::move(owner));
    }
    // A pooled sandbox is read often (a run that takes it waits on nothing else); a conversation's
    // sandbox, which may never get an owner, seldom.
    const auto interval = config.watch_later_owners && config.owner_pending_label.empty()
                              ? kLaterOwnerPollInterval
                              : kOwnerPollInterval;
    for (;;) {
        bool owner_ended = false;
        if (owners.empty()) {
            if (wait_for(life.get(), owners, static_cast<int>(interval.count()), owner_ended)) {
                std::_Exit(0);  // the sandbox ended first
            }
            const auto record = read_record(config);
            if (!record) {
                continue;
            }
            owners = open_live_owners(*record);
            if (owners.empty() && !recorded_owners(*record).empty()) {
                dispose(config);  // its owners ended before we could watch them
            }
            if (owners.empty() && !config.watch_later_owners &&
                record->labels.count(config.owner_pending_label) == 0) {
                std::_Exit(0);  // taken without an owner (a conversation's sandbox): it may outlive
            }
            continue;
        }
        if (!wait_for(life.get(), owners, -1, owner_ended) || !owner_ended) {
            std::_Exit(0);
        }
        // An owner ended: the sandbox stays while a co-owner still runs. A record that cannot be
        // read now is read again a few times; a sandbox whose record is gone goes.
        std::optional<SandboxRecord> record;
        for (int attempt = 0; attempt < 10 && !record; ++attempt) {
            record = read_record(config);
            if (!record) {
                ::usleep(50 * 1000);
            }
        }
        owners = record ? open_live_owners(*record) : std::vector<UniqueFd>{};
        if (owners.empty()) {
            dispose(config);
        }
    }
}

}  // namespace

UniqueFd start_owner_watch(const SupervisorConfig& config) {
    if (!config.owner && config.owner_pending_label.empty() && !config.watch_later_owners) {
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
