// Sandbox labels (core/labels.hpp) and the `k=v` label selector (runtime LabelSelector, what
// `maf-sandbox ls/rm --label` and the runtime's listing parse) on arbitrary bytes.
//
// Properties, beyond not crashing:
// - label_value never truncates: a safe value of at most 63 characters is kept verbatim, anything
//   else becomes `sha256-` and 48 hex digits; it is deterministic, and its output is always a
//   value the selector accepts and is kept verbatim when labelled again unless hashed;
// - the selector refuses only with InvalidArgument; an accepted selector's requirements all use
//   the documented alphabet and lengths, match a label set equal to them, and printed back as
//   `k=v,...` parse to the same requirements.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <map>
#include <string>

#include "fuzz_check.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"

namespace maf_sandbox {
namespace {

using fuzz::require;
using runtime::LabelSelector;

bool value_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

bool is_hashed(std::string_view v) {
    return v.size() == 7 + 48 && v.starts_with("sha256-") &&
           v.substr(7).find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

void check_label_value(const std::string& raw) {
    const auto value = label_value(raw);
    require(value == label_value(raw), "label_value is deterministic", raw);
    require(value.size() <= kMaxLabelValueLength, "a label value fits 63 characters", value);
    const bool safe = raw.size() <= kMaxLabelValueLength && !raw.starts_with("sha256-") &&
                      std::all_of(raw.begin(), raw.end(), value_char);
    if (safe) {
        require(value == raw, "a safe label value is kept verbatim", raw);
    } else {
        require(is_hashed(value), "an unsafe label value is hashed, never truncated", value);
    }
    // The value must be selectable: a sandbox labelled with it can be found again.
    const auto selector = LabelSelector::parse("k=" + value);
    require(selector.matches({{"k", value}}), "a label value is selectable", value);
}

void check_selector(const std::string& text) {
    std::optional<LabelSelector> selector;
    try {
        selector = LabelSelector::parse(text);
    } catch (const InvalidArgument&) {
        return;
    }
    require(!selector->empty(), "an accepted selector is never empty", text);
    std::string printed;
    for (const auto& [key, value] : selector->requirements()) {
        require(!key.empty() && key.size() <= 63, "a selector key is 1 to 63 characters", key);
        require(value.size() <= 63, "a selector value is at most 63 characters", value);
        for (const char c : key) {
            require(value_char(c) || c == '/', "a selector key uses the key alphabet", key);
        }
        require(std::all_of(value.begin(), value.end(), value_char),
                "a selector value uses the value alphabet", value);
        printed += (printed.empty() ? "" : ",") + key + "=" + value;
    }
    require(selector->matches(selector->requirements()), "a selector matches its own labels", text);
    const auto again = LabelSelector::parse(printed);
    require(again.requirements() == selector->requirements(),
            "a selector printed back parses to the same requirements", printed);
    auto fewer = selector->requirements();
    fewer.erase(fewer.begin());
    require(!selector->matches(fewer),
            "a selector does not match a label set missing one of its keys", printed);
}

}  // namespace
}  // namespace maf_sandbox

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider input(data, size);
    const auto raw = input.ConsumeRandomLengthString(200);
    maf_sandbox::check_label_value(raw);
    maf_sandbox::check_selector(input.ConsumeRemainingBytesAsString());
    return 0;
}
