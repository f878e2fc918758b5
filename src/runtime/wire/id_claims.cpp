// The host-wide claim table of sandbox host id ranges (id_claims.hpp). A claim file is named
// r<first>-<span>-p<pids> (its range and the pids it was admitted with), so a claim and the
// admission are decided from one directory listing; it holds the sandbox id, so a release never
// removes another sandbox's claim.
#include "maf_sandbox/runtime/wire/id_claims.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "maf_sandbox/core/capacity_error.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/rootless.hpp"
#include "maf_sandbox/runtime/kernel/state_dir.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = ".lock";
constexpr std::size_t kMaxIdBytes = 128;

struct Name {
    IdRange range;
    std::uint64_t pids = 0;
};

std::string file_name(const IdRange& range, std::uint64_t pids) {
    return fmt::format("r{}-{}-p{}", range.first, range.count, pids);
}

std::optional<Name> parse_name(const char* name) {
    unsigned long long first = 0;
    unsigned long long span = 0;
    unsigned long long pids = 0;
    int consumed = 0;
    if (std::sscanf(name, "r%llu-%llu-p%llu%n", &first, &span, &pids, &consumed) != 3 ||
        name[consumed] != '\0' || span == 0 || first + span > 0xFFFFFFFFull) {
        return std::nullopt;
    }
    return Name{{static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(span)}, pids};
}

// The directory lock: every change to the table happens while it is held.
class TableLock {
  public:
    explicit TableLock(const fs::path& dir) {
        const auto path = dir / kLockName;
        fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
        if (!fd_) {
            throw SystemError(errno,
                              fmt::format("opening the host id table's lock {}", path.string()),
                              "run as root, or set MAF_SANDBOX_ID_CLAIMS to a writable directory");
        }
        while (::flock(fd_.get(), LOCK_EX) != 0) {
            if (errno != EINTR) {
                throw SystemError(errno, "locking the host id table");
            }
        }
    }

  private:
    UniqueFd fd_;  // closing it releases the flock
};

struct Found {
    std::string file;
    Name name;
};

std::vector<Found> scan(const fs::path& dir) {
    std::vector<Found> found;
    DIR* stream = ::opendir(dir.c_str());
    if (stream == nullptr) {
        throw SystemError(errno, fmt::format("listing the host id table {}", dir.string()));
    }
    while (const dirent* entry = ::readdir(stream)) {
        if (auto name = parse_name(entry->d_name)) {
            found.push_back({entry->d_name, *name});
        }
    }
    ::closedir(stream);
    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
        return a.name.range.first < b.name.range.first;
    });
    return found;
}

// True when the claim's lock is held by someone (a live sandbox or its creator). A claim that
// vanished meanwhile counts as not held.
bool held(const fs::path& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
        return false;
    }
    return ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

std::string read_owner(const fs::path& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
        return {};
    }
    char buffer[kMaxIdBytes + 1];
    const ssize_t n = ::read(fd.get(), buffer, kMaxIdBytes);
    std::string text(buffer, n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!text.empty() && text.back() == '\n') {
        text.pop_back();
    }
    return text;
}

// Removes, from the table and from `claims`, every claim whose lock nobody holds, once
// `empty_sandbox` has ended what still runs of that sandbox (its egress helpers may still be
// ending, under ids of the range); a claim it throws for stays. Call under the table lock. True
// when one was removed.
bool reclaim_unheld(const fs::path& dir, std::vector<Found>& claims,
                    const std::function<void(const std::string&)>& empty_sandbox) {
    const auto before = claims.size();
    std::erase_if(claims, [&](const Found& claim) {
        const auto path = dir / claim.file;
        if (held(path)) {
            return false;
        }
        try {
            empty_sandbox(read_owner(path));
        } catch (const std::exception&) {
            return false;
        }
        return ::unlink(path.c_str()) == 0 || errno == ENOENT;
    });
    return claims.size() != before;
}

std::uint64_t charge(std::uint64_t pids, std::uint64_t budget) {
    return pids == 0 ? budget : pids;
}

}  // namespace

fs::path default_id_claims_dir() {
    if (const char* env = std::getenv(kIdClaimsEnv); env != nullptr && *env != '\0') {
        return fs::path(env);
    }
    // A rootless user's table is its own: it holds slots of that user's subordinate ids only.
    return running_rootless() ? rootless_runtime_dir() / "ids" : fs::path(kDefaultIdClaimsDir);
}

IdClaim::IdClaim(IdClaim&& other) noexcept
    : dir_(std::move(other.dir_)),
      sandbox_id_(std::move(other.sandbox_id_)),
      ids_(other.ids_),
      lock_(std::move(other.lock_)),
      committed_(std::exchange(other.committed_, true)) {}

IdClaim& IdClaim::operator=(IdClaim&& other) noexcept {
    if (this != &other) {
        release();
        dir_ = std::move(other.dir_);
        sandbox_id_ = std::move(other.sandbox_id_);
        ids_ = other.ids_;
        lock_ = std::move(other.lock_);
        committed_ = std::exchange(other.committed_, true);
    }
    return *this;
}

IdClaim::~IdClaim() {
    release();
}

void IdClaim::release() noexcept {
    if (!committed_ && !dir_.empty()) {
        try {
            IdClaims(dir_).release(ids_.host_base, sandbox_id_);
        } catch (...) {
            // gc removes a claim nobody holds
        }
    }
    committed_ = true;
    lock_.reset();
}

IdClaims::IdClaims(fs::path dir) : dir_(std::move(dir)) {
    if (dir_.empty()) {
        throw InvalidArgument("the host id table's directory is empty; set MAF_SANDBOX_ID_CLAIMS");
    }
    // A table another user could write would let them free or forge host id claims.
    (void)open_trusted_state_dir(dir_, 0700, "or the default /run/maf-sandbox/ids");
}

IdClaim IdClaims::claim(const IdPool& pool, const IdClaimRequest& request) const {
    if (request.sandbox_id.empty() || request.sandbox_id.size() > kMaxIdBytes ||
        request.sandbox_id.find_first_of("/\n") != std::string::npos) {
        throw InvalidArgument(fmt::format("'{}' cannot name a host id claim", request.sandbox_id));
    }
    const std::uint32_t guest_count = pool.guest_count(request.guest_count);
    const std::uint64_t span = std::uint64_t{guest_count} + kServiceIdCount;
    const std::uint64_t pids = charge(request.pids, request.pid_budget);
    const TableLock lock(dir_);
    auto claims = scan(dir_);

    if (request.pid_budget > 0) {
        const auto admitted = [&](bool count_stale) {
            std::uint64_t used = 0;
            for (const auto& claim : claims) {
                if (count_stale || held(dir_ / claim.file)) {
                    used += charge(claim.name.pids, request.pid_budget);
                }
            }
            return std::pair{used, used + pids <= request.pid_budget};
        };
        // (perf) From the names alone first; only a create that would be refused pays for
        // probing each claim's lock, so that claims of sandboxes gone without a gc do not count.
        if (!admitted(true).second) {
            const auto [used, fits] = admitted(false);
            if (!fits) {
                throw SandboxCapacityExceeded(fmt::format(
                    "no room for another sandbox: live sandboxes hold {} of the {} processes this "
                    "host gives sandboxes, and this one asks for {}; dispose of a sandbox, lower "
                    "its pids limit, or raise the share of kernel.pid_max sandboxes may use "
                    "(MAF_SANDBOX_PID_SHARE, docs/SECURITY.md)",
                    used, request.pid_budget, pids));
            }
        }
    }

    // The lowest slot no claim overlaps; claims are sorted by their first id.
    std::optional<IdMapping> chosen;
    const std::size_t slots = pool.slot_count(guest_count);
    const auto choose = [&] {
        std::size_t next_claim = 0;
        for (std::size_t index = 0; index < slots && !chosen; ++index) {
            const auto candidate = pool.slot(index, guest_count);
            const std::uint64_t first = candidate->host_base;
            while (next_claim < claims.size() && claims[next_claim].name.range.end() <= first) {
                ++next_claim;
            }
            // Claims from another pool setting may sit anywhere: any overlap disqualifies the slot.
            const bool overlaps = std::any_of(
                claims.begin() + static_cast<std::ptrdiff_t>(next_claim), claims.end(),
                [&](const Found& claim) {
                    return claim.name.range.first < first + span && claim.name.range.end() > first;
                });
            if (!overlaps) {
                chosen = candidate;
            }
        }
    };
    choose();
    if (!chosen && request.empty_sandbox && reclaim_unheld(dir_, claims, request.empty_sandbox)) {
        // Sandboxes killed without a gc leave claims nobody holds: their slots are free again,
        // decided under the table lock so no claim being made is mistaken for one of them.
        choose();
    }
    if (!chosen) {
        throw SandboxCapacityExceeded(fmt::format(
            "every host id slot of the pool is taken ({} slots of {} ids); dispose of a sandbox, "
            "run `maf-sandbox gc` to reclaim the slots of sandboxes that are gone, or give a "
            "larger pool (MAF_SANDBOX_ID_POOL)",
            slots, span));
    }

    const IdRange range{chosen->host_base, static_cast<std::uint32_t>(span)};
    const auto path = dir_ / file_name(range, pids);
    {
        UniqueFd out(
            ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
        const std::string content = request.sandbox_id + "\n";
        if (!out || ::write(out.get(), content.data(), content.size()) !=
                        static_cast<ssize_t>(content.size())) {
            const int error = errno;
            ::unlink(path.c_str());
            throw SystemError(error, fmt::format("writing the host id claim {}", path.string()));
        }
    }
    // Read-only: the sandbox's processes inherit this descriptor and must not change the claim.
    UniqueFd held_lock(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!held_lock || ::flock(held_lock.get(), LOCK_EX | LOCK_NB) != 0) {
        const int error = errno;
        ::unlink(path.c_str());  // still under the table lock, which a release would take again
        throw SystemError(error, fmt::format("locking the host id claim {}", path.string()));
    }
    IdClaim claim;
    claim.dir_ = dir_;
    claim.sandbox_id_ = request.sandbox_id;
    claim.ids_ = *chosen;
    claim.lock_ = std::move(held_lock);
    claim.committed_ = false;  // from here on the claim is taken back unless committed
    return claim;
}

void IdClaims::release(uid_t host_base, std::string_view sandbox_id) const {
    const TableLock lock(dir_);
    for (const auto& claim : scan(dir_)) {
        if (claim.name.range.first == host_base && read_owner(dir_ / claim.file) == sandbox_id) {
            if (::unlink((dir_ / claim.file).c_str()) != 0 && errno != ENOENT) {
                throw SystemError(errno, fmt::format("removing the host id claim {}",
                                                     (dir_ / claim.file).string()));
            }
        }
    }
}

std::vector<IdClaims::Entry> IdClaims::list() const {
    const TableLock lock(dir_);
    std::vector<Entry> entries;
    for (const auto& claim : scan(dir_)) {
        const auto path = dir_ / claim.file;
        entries.push_back({claim.name.range, claim.name.pids, read_owner(path), held(path)});
    }
    return entries;
}

std::vector<std::string> IdClaims::reclaim_stale(
    const std::function<void(const std::string&)>& before_release) const {
    std::vector<Found> stale;
    {
        const TableLock lock(dir_);
        for (auto& claim : scan(dir_)) {
            if (!held(dir_ / claim.file)) {
                stale.push_back(std::move(claim));
            }
        }
    }
    std::vector<std::string> reclaimed;
    for (const auto& claim : stale) {
        const auto path = dir_ / claim.file;
        const auto owner = read_owner(path);
        try {
            if (before_release && !owner.empty()) {
                before_release(owner);  // outside the table lock: it may take a while
            }
        } catch (...) {
            continue;
        }
        const TableLock lock(dir_);
        // Still the same unheld claim: a name is never reused while its file exists.
        if (!held(path) && read_owner(path) == owner && ::unlink(path.c_str()) == 0) {
            reclaimed.push_back(owner);
        }
    }
    return reclaimed;
}

}  // namespace maf_sandbox::runtime
