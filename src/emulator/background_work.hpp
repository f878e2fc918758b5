// Internal: which sandboxes have a launch or a deletion running in the background, and when a
// deletion that failed may be tried again. The lifecycle sweep reads it to tell a sandbox that is
// merely busy from one that is stuck (a `Creating` whose launch ended without recording it, a
// `Deleting` whose deletion failed): the stuck ones it resolves without a restart.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace maf_sandbox::emulator {

class BackgroundWork {
  public:
    using Clock = std::chrono::steady_clock;

    // Claims the sandbox for a launch or a deletion; false when one of that kind already runs
    // (the caller then starts none).
    bool begin_launch(const std::string& id) { return claim(launches_, id); }
    bool begin_delete(const std::string& id) { return claim(deletes_, id); }
    void end_launch(const std::string& id) { release(launches_, id); }
    // `retry_after` > 0: the deletion failed and may run again once that much time has passed.
    void end_delete(const std::string& id, Clock::duration retry_after = {}) {
        std::lock_guard lock(mutex_);
        deletes_.erase(id);
        if (retry_after > Clock::duration::zero()) {
            not_before_[id] = Clock::now() + retry_after;
        } else {
            not_before_.erase(id);
        }
    }

    bool launching(const std::string& id) const { return holds(launches_, id); }
    // Whether a sweep may start a deletion now: none runs and no failed one is backing off.
    bool may_delete(const std::string& id) const {
        std::lock_guard lock(mutex_);
        if (deletes_.count(id) != 0) {
            return false;
        }
        auto it = not_before_.find(id);
        return it == not_before_.end() || Clock::now() >= it->second;
    }

  private:
    bool claim(std::set<std::string>& set, const std::string& id) {
        std::lock_guard lock(mutex_);
        return set.insert(id).second;
    }
    void release(std::set<std::string>& set, const std::string& id) {
        std::lock_guard lock(mutex_);
        set.erase(id);
    }
    bool holds(const std::set<std::string>& set, const std::string& id) const {
        std::lock_guard lock(mutex_);
        return set.count(id) != 0;
    }

    mutable std::mutex mutex_;
    std::set<std::string> launches_;
    std::set<std::string> deletes_;
    std::map<std::string, Clock::time_point> not_before_;
};

}  // namespace maf_sandbox::emulator
