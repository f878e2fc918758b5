// Per-sandbox bounds on the host's shared kernel budgets (host_budgets.hpp): the numbers, their
// environment overrides, and the two places the supervisor applies them.
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "maf_sandbox/core/capacity_error.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

namespace json = boost::json;

namespace {

// Every limit name is max_ and lowercase letters or '_': a config can never name another file.
bool valid_limit_name(const std::string& name) {
    return name.starts_with("max_") && name.size() < 64 &&
           std::all_of(name.begin(), name.end(),
                       [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; });
}

std::uint64_t env_number(const char* name, std::uint64_t fallback, std::uint64_t low,
                         std::uint64_t high) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') {
        return fallback;
    }
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || value < low ||
        value > high) {
        throw InvalidArgument(
            fmt::format("{}='{}' is not a whole number from {} to {}", name, text, low, high));
    }
    return value;
}

// RLIMIT_CORE is 0, soft and hard: a guest's core dump would otherwise go to the host's
// core_pattern, which may be a helper running as host root that stores it outside the sandbox's
// disk limit. The guest cannot raise a hard limit (that needs CAP_SYS_RESOURCE on the host).
constexpr int kCreationLimits[] = {RLIMIT_NOFILE, RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE, RLIMIT_CORE};

}  // namespace

HostBudgets HostBudgets::from_environment() {
    HostBudgets budgets;
    budgets.pid_share_percent = static_cast<std::uint32_t>(
        env_number("MAF_SANDBOX_PID_SHARE", budgets.pid_share_percent, 1, 100));
    budgets.file_share_percent = static_cast<std::uint32_t>(
        env_number("MAF_SANDBOX_FILE_SHARE", budgets.file_share_percent, 1, 100));
    budgets.proxy_nofile = env_number("MAF_SANDBOX_PROXY_NOFILE", budgets.proxy_nofile, kMinNofile,
                                      std::uint64_t{1} << 20);
    budgets.sigpending =
        env_number("MAF_SANDBOX_SIGPENDING", budgets.sigpending, 1, std::uint64_t{1} << 31);
    budgets.msgqueue_bytes =
        env_number("MAF_SANDBOX_MSGQUEUE_BYTES", budgets.msgqueue_bytes, 0, std::uint64_t{1} << 40);
    return budgets;
}

json::value SandboxBudgets::to_json() const {
    json::array limits;
    for (const auto& limit : namespace_limits) {
        limits.emplace_back(json::object{{"name", limit.name}, {"value", limit.value}});
    }
    return json::object{{"nofile", nofile},
                        {"proxy_nofile", proxy_nofile},
                        {"sigpending", sigpending},
                        {"msgqueue_bytes", msgqueue_bytes},
                        {"namespace_limits", std::move(limits)}};
}

SandboxBudgets SandboxBudgets::from_json(const json::value& value) {
    const auto& in = value.as_object();
    SandboxBudgets budgets;
    budgets.nofile = in.at("nofile").to_number<std::uint64_t>();
    if (const auto* proxy = in.if_contains("proxy_nofile")) {
        budgets.proxy_nofile = proxy->to_number<std::uint64_t>();
    }
    budgets.sigpending = in.at("sigpending").to_number<std::uint64_t>();
    budgets.msgqueue_bytes = in.at("msgqueue_bytes").to_number<std::uint64_t>();
    for (const auto& item : in.at("namespace_limits").as_array()) {
        UserNamespaceLimit limit{std::string(item.at("name").as_string()),
                                 item.at("value").to_number<std::uint64_t>()};
        if (!valid_limit_name(limit.name)) {
            throw InvalidArgument(fmt::format(
                "'{}' is not a user namespace limit (/proc/sys/user/max_...)", limit.name));
        }
        budgets.namespace_limits.push_back(std::move(limit));
    }
    return budgets;
}

std::uint64_t read_kernel_number(const char* path) {
    UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
    char buffer[64] = {};
    const ssize_t n = fd ? ::read(fd.get(), buffer, sizeof buffer - 1) : -1;
    if (n <= 0) {
        throw SystemError(n < 0 ? errno : EIO, fmt::format("reading {}", path));
    }
    return std::strtoull(buffer, nullptr, 10);
}

std::uint64_t pid_budget(const HostBudgets& budgets, std::uint64_t pid_max) {
    return pid_max * budgets.pid_share_percent / 100;
}

SandboxBudgets sandbox_budgets(const HostBudgets& budgets, std::uint64_t pids,
                               std::uint64_t file_max, std::uint64_t pid_max, bool egress_proxy) {
    const std::uint64_t processes = pids == 0 ? pid_max : pids;
    const std::uint64_t share = file_max / 100 * budgets.file_share_percent;
    // The proxy runs on the sandbox's behalf, so its descriptors are the sandbox's: taken from
    // the share first, never more than half of it.
    const std::uint64_t proxy = egress_proxy ? std::min(budgets.proxy_nofile, share / 2) : 0;
    if (egress_proxy && proxy < kMinNofile) {
        throw SandboxCapacityExceeded(fmt::format(
            "the egress proxy would get only {} open files within the sandbox's {}% share of "
            "this host's fs.file-max ({}); raise the share (MAF_SANDBOX_FILE_SHARE) or the "
            "proxy's limit (MAF_SANDBOX_PROXY_NOFILE, at least {}; docs/SECURITY.md)",
            proxy, budgets.file_share_percent, file_max, kMinNofile));
    }
    const std::uint64_t nofile =
        std::min(budgets.max_nofile, (share - proxy) / std::max<std::uint64_t>(processes, 1));
    if (nofile < kMinNofile) {
        throw SandboxCapacityExceeded(fmt::format(
            "a sandbox of {} processes would leave each only {} open files within its {}% share "
            "of this host's fs.file-max ({}); lower the pids limit (at most {} here) or raise the "
            "share (MAF_SANDBOX_FILE_SHARE, docs/SECURITY.md)",
            processes, nofile, budgets.file_share_percent, file_max, share / kMinNofile));
    }
    SandboxBudgets out;
    out.nofile = nofile;
    out.proxy_nofile = proxy;
    out.sigpending = budgets.sigpending;
    out.msgqueue_bytes = budgets.msgqueue_bytes;
    for (const auto& limit : budgets.namespace_limits) {
        if (!valid_limit_name(limit.name)) {
            throw InvalidArgument(fmt::format(
                "'{}' is not a user namespace limit (/proc/sys/user/max_...)", limit.name));
        }
    }
    out.namespace_limits = budgets.namespace_limits;
    return out;
}

bool limit_open_files(std::uint64_t nofile) noexcept {
    const rlimit limit{nofile, nofile};
    return ::setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

ScopedCreationLimits::ScopedCreationLimits(const SandboxBudgets& budgets) {
    if (budgets.nofile == 0) {
        return;  // an older launcher's config: inherit as before
    }
    const std::uint64_t values[] = {budgets.nofile, budgets.sigpending, budgets.msgqueue_bytes, 0};
    for (std::size_t i = 0; i < std::size(kCreationLimits); ++i) {
        rlimit old{};
        ::getrlimit(kCreationLimits[i], &old);
        const rlimit wanted{values[i], values[i]};
        if (::setrlimit(kCreationLimits[i], &wanted) != 0) {
            throw SystemError(errno, fmt::format("setting resource limit {} of the sandbox to {}",
                                                 kCreationLimits[i], values[i]));
        }
        saved_.push_back({kCreationLimits[i], {old.rlim_cur, old.rlim_max}});
    }
}

ScopedCreationLimits::~ScopedCreationLimits() {
    for (const auto& [resource, value] : saved_) {
        const rlimit old{value.first, value.second};
        ::setrlimit(resource, &old);
    }
}

void write_user_namespace_limits(const std::vector<UserNamespaceLimit>& limits) {
    for (const auto& limit : limits) {
        if (!valid_limit_name(limit.name)) {
            throw InvalidArgument(fmt::format("'{}' is not a user namespace limit", limit.name));
        }
        const auto path = "/proc/sys/user/" + limit.name;
        const auto text = std::to_string(limit.value);
        UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
        if (!fd ||
            ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
            throw SystemError(errno, fmt::format("setting the sandbox's {} to {}", path, text));
        }
    }
}

}  // namespace maf_sandbox::runtime
