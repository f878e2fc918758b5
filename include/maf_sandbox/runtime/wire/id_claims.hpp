// The host-wide table of which host ids belong to which live sandbox, and the admission of a new
// sandbox against the host's pid budget.
//
// One claim file per sandbox in one directory for the whole host (every state directory, the CLI,
// the emulator and tests alike: two of them sharing a range would share an identity), named for
// the range it holds and the pids it was admitted with. A claim is live while its lock is held:
// the creator takes an exclusive flock on the file and hands the descriptor to the sandbox's
// supervisor, whose PID 1 keeps it until the sandbox ends, so a claim nobody holds is provably of
// a sandbox that is gone (gc reclaims it), with no pid to go stale and no grace period. Every
// change happens under an flock on the directory's lock file, so claims never race.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/capacity_error.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "maf_sandbox/runtime/wire/id_ranges.hpp"

namespace maf_sandbox::runtime {

// Where the claims live when neither the caller nor $MAF_SANDBOX_ID_CLAIMS names a directory. On
// /run (a tmpfs), so a reboot, which ends every sandbox, forgets every claim.
inline constexpr const char* kDefaultIdClaimsDir = "/run/maf-sandbox/ids";
inline constexpr const char* kIdClaimsEnv = "MAF_SANDBOX_ID_CLAIMS";

// $MAF_SANDBOX_ID_CLAIMS when set and non-empty, else kDefaultIdClaimsDir.
std::filesystem::path default_id_claims_dir();

struct IdClaimRequest {
    std::string sandbox_id;
    std::uint32_t guest_count = kFullGuestIdCount;  // lowered to what the pool holds
    // Charged against pid_budget: the sum over live claims may not exceed it. 0 (no pid limit)
    // is charged as the whole budget.
    std::uint64_t pids = 0;
    std::uint64_t pid_budget = 0;  // 0: no admission check
    // When every slot is taken, claims nobody holds (sandboxes killed with nobody left to release
    // their claims) are taken back under the table lock, each after empty_sandbox(its sandbox id)
    // has ended whatever of that sandbox still runs (a throw keeps the claim). Empty: none is.
    std::function<void(const std::string&)> empty_sandbox;
};

// One sandbox's claim. Released (its file removed) on destruction unless committed; committed,
// it stays until IdClaims::release or gc. Move-only.
class IdClaim {
  public:
    IdClaim() = default;
    IdClaim(IdClaim&& other) noexcept;
    IdClaim& operator=(IdClaim&& other) noexcept;
    IdClaim(const IdClaim&) = delete;
    IdClaim& operator=(const IdClaim&) = delete;
    ~IdClaim();

    const IdMapping& ids() const noexcept { return ids_; }
    const std::filesystem::path& dir() const noexcept { return dir_; }
    // The descriptor holding the claim's lock (read-only, close-on-exec). The sandbox's processes
    // inherit it; the claim is live while any of them has it open.
    int lock_fd() const noexcept { return lock_.get(); }
    // Keeps the claim when this object is destroyed (the lock then lives on in whoever inherited
    // lock_fd).
    void commit() noexcept { committed_ = true; }

  private:
    friend class IdClaims;
    void release() noexcept;

    std::filesystem::path dir_;
    std::string sandbox_id_;
    IdMapping ids_;
    UniqueFd lock_;
    bool committed_ = false;
};

class IdClaims {
  public:
    // Creates the directory (mode 0700) when missing. Throws SystemError.
    explicit IdClaims(std::filesystem::path dir = default_id_claims_dir());

    const std::filesystem::path& dir() const noexcept { return dir_; }

    // Claims the lowest slot of `pool` (of request.guest_count ids, lowered to what the pool
    // holds) that no claim overlaps, for request.sandbox_id. Throws SandboxCapacityExceeded when
    // the live claims' pids plus request.pids would exceed request.pid_budget, or when every slot
    // is taken; InvalidArgument when the pool cannot hold one sandbox; SystemError.
    IdClaim claim(const IdPool& pool, const IdClaimRequest& request) const;

    // Removes the claim whose range starts at `host_base` if it names `sandbox_id` (whoever still
    // holds its lock: call once the sandbox's processes are gone). Missing is success.
    void release(uid_t host_base, std::string_view sandbox_id) const;

    struct Entry {
        IdRange range;  // guest and service ids together
        std::uint64_t pids = 0;
        std::string sandbox_id;
        bool live = false;  // its lock is held
    };
    // Every claim, ordered by range.
    std::vector<Entry> list() const;

    // Removes every claim whose lock nobody holds, after `before_release(sandbox_id)` (gc kills
    // whatever still runs in that sandbox's cgroups; a throw keeps the claim). Returns the ids of
    // the sandboxes whose claims were removed.
    std::vector<std::string> reclaim_stale(
        const std::function<void(const std::string&)>& before_release = {}) const;

  private:
    std::filesystem::path dir_;
};

}  // namespace maf_sandbox::runtime
