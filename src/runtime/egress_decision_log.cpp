#include "egress_decision_log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
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

EgressDecisionLog::EgressDecisionLog(const std::filesystem::path& path)
    : path_(path),
      fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600)) {
    if (!fd_) {
        throw SystemError(errno, fmt::format("opening the egress decision log {}", path.string()),
                          "make its directory exist and be writable by the proxy");
    }
}

void EgressDecisionLog::append(const EgressDecision& decision) {
    const std::string line = format_egress_decision(decision) + "\n";
    ssize_t written = -1;
    do {
        written = ::write(fd_.get(), line.data(), line.size());
    } while (written < 0 && errno == EINTR);
    if (written != static_cast<ssize_t>(line.size())) {
        throw SystemError(written < 0 ? errno : EIO,
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
