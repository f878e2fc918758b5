#include "egress_decision_log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <ctime>
#include <fstream>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::runtime {
namespace {

using std::chrono::system_clock;

std::string format_time(system_clock::time_point time) {
    const auto millis =
        std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
    const std::time_t seconds = static_cast<std::time_t>(millis / 1000);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900,
                       utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                       millis % 1000);
}

// Parses exactly what format_time writes; nothing else.
std::optional<system_clock::time_point> parse_time(std::string_view text) {
    std::tm utc{};
    int millis = 0;
    char zone = 0;
    const std::string copy(text);
    if (text.size() != 24 ||
        std::sscanf(copy.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &utc.tm_year, &utc.tm_mon,
                    &utc.tm_mday, &utc.tm_hour, &utc.tm_min, &utc.tm_sec, &millis, &zone) != 8 ||
        zone != 'Z') {
        return std::nullopt;
    }
    utc.tm_year -= 1900;
    utc.tm_mon -= 1;
    const std::time_t seconds = timegm(&utc);
    return system_clock::from_time_t(seconds) + std::chrono::milliseconds(millis);
}

std::optional<EgressDecision> parse_line(std::string_view line) {
    boost::system::error_code error;
    const auto json = boost::json::parse(line, error);
    const auto* object = json.if_object();
    if (error || !object) {
        return std::nullopt;
    }
    const auto* time = object->if_contains("time");
    const auto* method = object->if_contains("method");
    const auto* host = object->if_contains("host");
    const auto* port = object->if_contains("port");
    const auto* allowed = object->if_contains("allowed");
    const auto* reason = object->if_contains("reason");
    if (!time || !time->is_string() || !method || !method->is_string() || !host ||
        !host->is_string() || !port || !port->is_int64() || !allowed || !allowed->is_bool() ||
        !reason || !reason->is_string()) {
        return std::nullopt;
    }
    const auto when = parse_time(time->get_string());
    const auto port_number = port->get_int64();
    if (!when || port_number < 0 || port_number > 65535) {
        return std::nullopt;
    }
    EgressDecision decision;
    decision.time = *when;
    decision.method = method->get_string();
    decision.host = host->get_string();
    decision.port = static_cast<std::uint16_t>(port_number);
    decision.allowed = allowed->get_bool();
    decision.reason = reason->get_string();
    return decision;
}

}  // namespace

std::string format_egress_decision(const EgressDecision& decision) {
    const boost::json::object object{{"time", format_time(decision.time)},
                                     {"method", decision.method},
                                     {"host", decision.host},
                                     {"port", decision.port},
                                     {"allowed", decision.allowed},
                                     {"reason", decision.reason}};
    return boost::json::serialize(object);
}

std::string truncate_log_field(std::string_view value, std::size_t most) {
    constexpr std::string_view kCut = "...";
    if (value.size() <= most) {
        return std::string(value);
    }
    std::size_t keep = most > kCut.size() ? most - kCut.size() : 0;
    // Back off over continuation bytes (10xxxxxx) so no character is split.
    while (keep > 0 && (static_cast<unsigned char>(value[keep]) & 0xC0) == 0x80) {
        --keep;
    }
    return std::string(value.substr(0, keep)) + std::string(kCut.substr(0, most - keep));
}

namespace {

// Room kept for the one line that says the log is full.
constexpr std::uint64_t kFullLineReserve = 256;

UniqueFd open_for_append(const std::filesystem::path& path) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) {
        throw SystemError(errno, fmt::format("opening the egress decision log {}", path.string()),
                          "make its directory exist and be writable by the proxy");
    }
    return fd;
}

}  // namespace

EgressDecisionLog::EgressDecisionLog(const std::filesystem::path& path,
                                     const EgressLogLimits& limits)
    : EgressDecisionLog(open_for_append(path), path, limits) {}

EgressDecisionLog::EgressDecisionLog(UniqueFd fd, const std::filesystem::path& path,
                                     const EgressLogLimits& limits)
    : path_(path), fd_(std::move(fd)), limits_(limits) {
    struct stat info {};
    if (!fd_ || ::fstat(fd_.get(), &info) != 0) {
        throw SystemError(fd_ ? errno : EBADF,
                          fmt::format("opening the egress decision log {}", path.string()));
    }
    size_ = static_cast<std::uint64_t>(info.st_size);
    full_ = !fits(0);
}

bool EgressDecisionLog::fits(std::size_t bytes) const noexcept {
    return size_ + bytes + kFullLineReserve <= limits_.max_bytes;
}

bool EgressDecisionLog::write_line(const std::string& line) {
    ssize_t written = -1;
    do {
        written = ::write(fd_.get(), line.data(), line.size());
    } while (written < 0 && errno == EINTR);
    if (written > 0) {
        size_ += static_cast<std::uint64_t>(written);
    }
    return written == static_cast<ssize_t>(line.size());
}

void EgressDecisionLog::mark_full() {
    if (full_) {
        return;
    }
    full_ = true;
    const boost::json::object object{{"time", format_time(std::chrono::system_clock::now())},
                                     {"log_full", true},
                                     {"max_bytes", limits_.max_bytes},
                                     {"suppressed", suppressed_}};
    const std::string line = boost::json::serialize(object) + "\n";
    if (size_ + line.size() <= limits_.max_bytes) {
        write_line(line);  // best effort: nothing is written after it anyway
    }
}

void EgressDecisionLog::flush_suppressed() {
    if (suppressed_ == 0 || full_) {
        return;
    }
    const boost::json::object object{{"time", format_time(std::chrono::system_clock::now())},
                                     {"suppressed", suppressed_}};
    const std::string line = boost::json::serialize(object) + "\n";
    if (!fits(line.size())) {
        mark_full();
        return;
    }
    if (!write_line(line)) {
        throw SystemError(errno ? errno : EIO,
                          fmt::format("appending to the egress decision log {}", path_.string()),
                          "free space on its filesystem");
    }
    suppressed_ = 0;
}

void EgressDecisionLog::append(const EgressDecision& decision, Clock::time_point now) {
    if (full_) {
        return;
    }
    if (now - window_start_ >= std::chrono::seconds(1)) {
        window_start_ = now;
        in_window_ = 0;
        flush_suppressed();
        if (full_) {
            return;
        }
    }
    if (in_window_ >= limits_.records_per_second) {
        ++suppressed_;
        return;
    }
    ++in_window_;
    EgressDecision bounded = decision;
    bounded.method = truncate_log_field(decision.method, kEgressLogMethodBytes);
    bounded.host = truncate_log_field(decision.host, kEgressLogHostBytes);
    bounded.reason = truncate_log_field(decision.reason, kEgressLogReasonBytes);
    const std::string line = format_egress_decision(bounded) + "\n";
    if (!fits(line.size())) {
        ++suppressed_;
        mark_full();
        return;
    }
    errno = 0;
    if (!write_line(line)) {
        throw SystemError(errno ? errno : EIO,
                          fmt::format("appending to the egress decision log {}", path_.string()),
                          "free space on its filesystem");
    }
}

std::vector<EgressDecision> read_egress_decisions(const std::filesystem::path& log) {
    std::vector<EgressDecision> decisions;
    std::ifstream in(log);
    if (!in) {
        return decisions;
    }
    std::string line;
    while (std::getline(in, line)) {
        if (auto decision = parse_line(line)) {
            decisions.push_back(std::move(*decision));
        }
    }
    return decisions;
}

}  // namespace maf_sandbox::runtime
