// Guest path confinement (core/paths.hpp) on arbitrary path and working-directory bytes.
//
// Properties, beyond not crashing:
// - confine_guest_path refuses only with ConfinementEscape, always refuses a backslash, a NUL or
//   invalid UTF-8, and what it accepts is normalised and lies inside the working directory;
// - for an absolute working directory it agrees exactly with an independent lexical model
//   (a component stack), so no accepted path escapes and no inside path is refused;
// - normpath is idempotent;
// - guest_directory_chain names only ancestors of the working directory and paths inside it;
// - confine_guest_write_path, over a fake file system drawn from the input, succeeds only when the
//   walk from the root to the leaf's parent meets no link or non-directory before any absent
//   directory, and the leaf is not a link; it never asks about a path outside that chain.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox {
namespace {

using fuzz::require;

std::vector<std::string> components(std::string_view path) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= path.size()) {
        auto slash = path.find('/', start);
        if (slash == std::string_view::npos) {
            slash = path.size();
        }
        out.emplace_back(path.substr(start, slash - start));
        start = slash + 1;
    }
    return out;
}

// The lexical model: resolve `path` against the absolute `base` with a stack of names.
std::vector<std::string> resolve_model(std::string_view path, std::string_view base) {
    std::vector<std::string> stack;
    auto apply = [&](std::string_view text) {
        for (const auto& c : components(text)) {
            if (c.empty() || c == ".") {
                continue;
            }
            if (c == "..") {
                if (!stack.empty()) {
                    stack.pop_back();
                }
            } else {
                stack.push_back(c);
            }
        }
    };
    if (!path.starts_with('/')) {
        apply(base);
    }
    apply(path);
    return stack;
}

std::string from_stack(const std::vector<std::string>& stack) {
    std::string out;
    for (const auto& c : stack) {
        out += '/';
        out += c;
    }
    return out.empty() ? "/" : out;
}

bool inside_or_same(std::string_view path, std::string_view base) {
    if (path == base) {
        return true;
    }
    const std::string prefix = base.ends_with('/') ? std::string(base) : std::string(base) + "/";
    return path.starts_with(prefix);
}

bool exactly_two_leading_slashes(std::string_view p) {
    return p.starts_with("//") && !p.starts_with("///");
}

EntryKind fake_kind(std::size_t seed, const std::string& path, bool& absent) {
    const auto h = std::hash<std::string>{}(path) ^ seed;
    absent = h % 11 == 2;
    switch (h % 11) {
        case 0:
            return EntryKind::symlink;
        case 1:
            return EntryKind::file;
        default:
            return EntryKind::directory;
    }
}

void check_confine(const std::string& path, const std::string& wd) {
    std::optional<std::string> resolved;
    try {
        resolved = confine_guest_path(path, wd);
    } catch (const ConfinementEscape&) {
    }
    const bool forbidden_bytes =
        path.find('\\') != std::string::npos || path.find('\0') != std::string::npos ||
        wd.find('\0') != std::string::npos || !is_valid_utf8(path) || !is_valid_utf8(wd);
    if (forbidden_bytes) {
        require(!resolved, "a backslash, a NUL or invalid UTF-8 is always refused", path);
        return;
    }
    const auto base = normpath(wd);
    require(normpath(base) == base, "normpath is idempotent", wd);
    if (resolved) {
        require(normpath(*resolved) == *resolved, "a confined path is normalised", *resolved);
        require(guest_path_relative_to(*resolved, base).has_value(),
                "a confined path lies inside the working directory", *resolved + " vs " + base);
    }
    if (!wd.starts_with('/') || exactly_two_leading_slashes(wd) ||
        exactly_two_leading_slashes(path)) {
        return;  // the model covers absolute bases without POSIX's implementation-defined '//'
    }
    const auto model_base = resolve_model("", base);
    const auto model = resolve_model(path, base);
    const bool model_inside = model.size() >= model_base.size() &&
                              std::equal(model_base.begin(), model_base.end(), model.begin());
    require(model_inside == resolved.has_value(), "confinement agrees with the lexical model",
            path + " in " + wd);
    if (resolved) {
        require(*resolved == from_stack(model), "the confined path is the model's path",
                *resolved + " vs " + from_stack(model));
        for (const auto& c : components(resolved->substr(1))) {
            require(c != ".." && c != ".", "a confined path has no dot components", *resolved);
        }
    }
}

void check_chain(const std::string& path, const std::string& wd) {
    // The chain spells a '//' base with one slash, which names the same directory on Linux.
    if (path.find('\0') != std::string::npos || wd.find('\0') != std::string::npos ||
        !wd.starts_with('/') || exactly_two_leading_slashes(wd)) {
        return;
    }
    std::vector<std::string> chain;
    try {
        chain = guest_directory_chain(path, wd);
    } catch (const ConfinementEscape&) {
        return;
    }
    const auto base = normpath(wd);
    std::string previous;
    for (const auto& entry : chain) {
        require(inside_or_same(entry, base) || inside_or_same(base, entry),
                "the chain names only ancestors of the working directory and paths inside it",
                entry + " vs " + base);
        if (!previous.empty()) {
            require(entry.starts_with(previous + "/") || previous == "/",
                    "the chain descends one component at a time", previous + " -> " + entry);
        }
        previous = entry;
    }
}

void check_write_path(const std::string& path, const std::string& wd, std::size_t seed) {
    if (!wd.starts_with('/') || exactly_two_leading_slashes(wd) ||
        exactly_two_leading_slashes(path) || path.find('\0') != std::string::npos ||
        wd.find('\0') != std::string::npos) {
        return;
    }
    const auto base = normpath(wd);
    std::set<std::string> asked;
    NoFollowStat stat = [&](std::string absolute) -> Task<std::optional<SandboxEntry>> {
        asked.insert(absolute);
        bool absent = false;
        const auto kind = fake_kind(seed, absolute, absent);
        if (absent) {
            co_return std::nullopt;
        }
        co_return SandboxEntry{absolute, kind, std::nullopt};
    };
    std::optional<std::string> resolved;
    try {
        resolved = run_blocking(confine_guest_write_path(stat, path, wd));
    } catch (const ConfinementEscape&) {
    } catch (const NotADirectory&) {
    }
    for (const auto& p : asked) {
        require(inside_or_same(p, base) || inside_or_same(base, p),
                "the ancestor walk asks only about the chain", p + " vs " + base);
    }
    if (!resolved) {
        return;
    }
    require(*resolved != base && inside_or_same(*resolved, base),
            "a write path lies strictly inside the working directory", *resolved);
    // Walk the fake file system from the root the way a kernel would resolve the parent.
    const auto names = components(resolved->substr(1));
    std::string current;
    for (std::size_t i = 0; i + 1 < names.size(); ++i) {
        current += "/" + names[i];
        bool absent = false;
        const auto kind = fake_kind(seed, current, absent);
        if (absent) {
            return;  // nothing below an absent directory exists
        }
        require(kind == EntryKind::directory, "an accepted write path crosses no link or file",
                *resolved + " at " + current);
    }
    bool absent = false;
    const auto leaf = fake_kind(seed, *resolved, absent);
    require(absent || leaf != EntryKind::symlink, "an accepted write path is not a link",
            *resolved);
}

}  // namespace
}  // namespace maf_sandbox

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider input(data, size);
    const auto seed = input.ConsumeIntegral<std::size_t>();
    const auto wd = input.ConsumeRandomLengthString(256);
    const auto path = input.ConsumeRemainingBytesAsString();
    maf_sandbox::check_confine(path, wd);
    maf_sandbox::check_chain(path, wd);
    maf_sandbox::check_write_path(path, wd, seed);
    return 0;
}
