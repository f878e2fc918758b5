#include "signal_dispose.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>

namespace maf_sandbox::cli::lean {

namespace {

// The watcher's own stop, sent to it by the destructor; one from anyone else is ignored.
constexpr int kStopSignal = SIGUSR2;

sigset_t watched() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, kStopSignal);
    return set;
}

}  // namespace

struct DisposeOnSignal::State {
    std::function<void(bool)> dispose;
    std::mutex mutex;
    bool disposed = false;
    std::atomic<bool> stopping{false};
    sigset_t previous{};
    std::thread watcher;

    void dispose_once(bool interrupted) {
        std::lock_guard guard(mutex);
        if (!disposed) {
            disposed = true;
            dispose(interrupted);
        }
    }

    void watch() {
        const sigset_t set = watched();
        for (;;) {
            siginfo_t info{};
            const int signal = ::sigwaitinfo(&set, &info);
            if (signal < 0) {
                continue;  // EINTR
            }
            if (signal == kStopSignal) {
                if (stopping.load()) {
                    return;
                }
                continue;
            }
            dispose_once(true);
            ::_exit(128 + signal);
        }
    }
};

DisposeOnSignal::DisposeOnSignal(std::function<void(bool)> dispose)
    : state_(std::make_shared<State>()) {
    state_->dispose = std::move(dispose);
    const sigset_t set = watched();
    // Blocked before the thread starts, so it inherits the mask and no other thread takes them.
    ::pthread_sigmask(SIG_BLOCK, &set, &state_->previous);
    state_->watcher = std::thread([state = state_.get()] { state->watch(); });
}

DisposeOnSignal::~DisposeOnSignal() {
    state_->stopping = true;
    ::pthread_kill(state_->watcher.native_handle(), kStopSignal);
    state_->watcher.join();
    ::pthread_sigmask(SIG_SETMASK, &state_->previous, nullptr);
}

void DisposeOnSignal::dispose_now() {
    state_->dispose_once(false);
}

}  // namespace maf_sandbox::cli::lean
