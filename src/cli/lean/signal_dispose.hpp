// SIGINT and SIGTERM during the lean front end's pooled `run`: its exec is a blocking call, so a
// thread of its own waits for the signal (blocked everywhere else), disposes of the run's sandbox
// and ends the process with 128 + the signal's number, as a shell reports a program a signal
// ended. Without it the owner watch would still dispose of the sandbox, but only after the CLI had
// exited.
#pragma once

#include <functional>
#include <memory>

namespace maf_sandbox::cli::lean {

// Runs `dispose` exactly once: from dispose_now() on the normal path (`interrupted` false), or from
// the watching thread when SIGINT or SIGTERM arrives first (true; the process then exits). While it
// lives, those two signals are blocked in the calling thread; its destructor stops the watcher and
// unblocks them.
class DisposeOnSignal {
  public:
    explicit DisposeOnSignal(std::function<void(bool interrupted)> dispose);
    DisposeOnSignal(const DisposeOnSignal&) = delete;
    DisposeOnSignal& operator=(const DisposeOnSignal&) = delete;
    ~DisposeOnSignal();

    // The normal path's disposal; a signal arriving during it waits for it, then exits.
    void dispose_now();

    struct State;

  private:
    std::shared_ptr<State> state_;
};

}  // namespace maf_sandbox::cli::lean
