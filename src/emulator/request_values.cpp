#include "request_values.hpp"

#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "refusal.hpp"

namespace maf_sandbox::emulator {

namespace {

constexpr std::size_t kMaxLabelValue = 63;

}  // namespace

double parse_cpu(const std::string& text) {
    if (text.empty()) {
        return 0;
    }
    try {
        const double value = text.back() == 'm'
                                 ? std::stod(text.substr(0, text.size() - 1)) / 1000.0
                                 : std::stod(text);
        return std::isfinite(value) && value > 0 ? value : 0;
    } catch (...) {
        return 0;
    }
}

std::uint64_t parse_quantity(const std::string& text) {
    static const std::pair<const char*, std::uint64_t> units[] = {
        {"Ki", 1ull << 10}, {"Mi", 1ull << 20}, {"Gi", 1ull << 30},  {"Ti", 1ull << 40},
        {"K", 1000ull},     {"M", 1000000ull},  {"G", 1000000000ull}};
    for (const auto& [suffix, factor] : units) {
        if (text.ends_with(suffix)) {
            try {
                const double value = std::stod(text.substr(0, text.size() - std::strlen(suffix))) *
                                     static_cast<double>(factor);
                // Out of range (or NaN): unset, never a cast of a value no integer holds.
                return std::isfinite(value) && value > 0 && value < 0x1p63
                           ? static_cast<std::uint64_t>(value)
                           : 0;
            } catch (...) {
                return 0;
            }
        }
    }
    try {
        return static_cast<std::uint64_t>(std::stoull(text));
    } catch (...) {
        return 0;
    }
}

std::string string_field(const boost::json::object& o, const char* key) {
    if (auto* v = o.if_contains(key); v != nullptr && v->is_string()) {
        return std::string(v->as_string());
    }
    return {};
}

bool truthy(const std::optional<std::string>& value, bool fallback) {
    if (!value) {
        return fallback;
    }
    return *value == "true" || *value == "True" || *value == "1";
}

std::map<std::string, std::string> parse_labels(const boost::json::object& body) {
    std::map<std::string, std::string> out;
    const auto* v = body.if_contains("labels");
    if (v == nullptr || v->is_null()) {
        return out;
    }
    if (!v->is_object()) {
        throw invalid_body("'labels' must be an object of string values.");
    }
    for (const auto& [k, value] : v->as_object()) {
        if (!value.is_string()) {
            throw invalid_body(fmt::format("Label value for key '{}' must be a string", k));
        }
        if (k.empty()) {
            throw invalid_body("Label keys must not be empty");
        }
        if (value.as_string().size() > kMaxLabelValue) {
            throw invalid_body(
                fmt::format("Label value for key '{}' exceeds 63 characters", std::string(k)));
        }
        out[std::string(k)] = std::string(value.as_string());
    }
    return out;
}

}  // namespace maf_sandbox::emulator
