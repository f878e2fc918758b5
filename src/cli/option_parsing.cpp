#include "option_parsing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/quantities.hpp"

namespace maf_sandbox::cli {
namespace {

// Edit distance with adjacent transpositions counted as one edit: `--memroy` is one slip away
// from `--memory`, as a person sees it.
std::size_t typing_distance(std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) {
        d[i][0] = i;
    }
    for (std::size_t j = 0; j <= b.size(); ++j) {
        d[0][j] = j;
    }
    for (std::size_t i = 1; i <= a.size(); ++i) {
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
            }
        }
    }
    return d[a.size()][b.size()];
}

std::string_view without_dashes(std::string_view word) {
    const auto start = word.find_first_not_of('-');
    return start == std::string_view::npos ? word : word.substr(start);
}

std::string shown(const std::string& word) {
    return word.size() <= 40 ? word : word.substr(0, 40) + "...";
}

std::vector<std::string> command_names(const CLI::App& app) {
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
        if (!sub->get_name().empty() && !sub->get_group().empty()) {
            names.push_back(sub->get_name());
        }
    }
    return names;
}

CLI::App* command_named(CLI::App& app, const std::string& name) {
    for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
        if (sub->check_name(name)) {
            return sub;
        }
    }
    return nullptr;
}

// The option `name` (`--memory`, `-e`) of `command` or of a command above it (the global ones).
const CLI::Option* option_named(const CLI::App& command, const std::string& name) {
    for (const CLI::App* at = &command; at != nullptr; at = at->get_parent()) {
        for (const auto* option : at->get_options()) {
            if (!option->get_positional() && option->check_name(name)) {
                return option;
            }
        }
    }
    return nullptr;
}

std::vector<std::string> option_names(const CLI::App& command) {
    std::vector<std::string> names;
    for (const CLI::App* at = &command; at != nullptr; at = at->get_parent()) {
        for (const auto* option : at->get_options()) {
            for (const auto& name : option->get_lnames()) {
                names.push_back("--" + name);
            }
        }
    }
    return names;
}

std::string command_path(const CLI::App& command) {
    std::string path;
    for (const CLI::App* at = &command; at != nullptr; at = at->get_parent()) {
        path = at->get_parent() == nullptr ? "maf-sandbox" + path : " " + at->get_name() + path;
    }
    return path;
}

std::string did_you_mean(const std::string& typed, const std::vector<std::string>& candidates,
                         const std::string& otherwise) {
    const auto best = closest(typed, candidates);
    return best.empty() ? otherwise : fmt::format("did you mean '{}'?", best);
}

}  // namespace

CLI::Validator byte_size() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            try {
                const auto bytes = parse_byte_size(text);
                if (bytes == 0) {
                    return fmt::format("'{}' is not above zero; give {}", shown(text),
                                       kByteSizeForms);
                }
                text = std::to_string(bytes);
            } catch (const InvalidArgument& e) {
                return e.what();
            }
            return {};
        },
        "SIZE", "byte size");
}

CLI::Validator duration() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            try {
                const auto seconds = parse_duration(text).count();
                if (seconds <= 0) {
                    return fmt::format("'{}' is not above zero; give {}", shown(text),
                                       kDurationForms);
                }
                text = fmt::format("{}", seconds);
            } catch (const InvalidArgument& e) {
                return e.what();
            }
            return {};
        },
        "DURATION", "duration");
}

CLI::Validator positive_count() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            const bool digits =
                !text.empty() && text.size() <= 19 &&
                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
            if (!digits || text.find_first_not_of('0') == std::string::npos) {
                return fmt::format("'{}' is not a whole number above zero", shown(text));
            }
            return {};
        },
        "N", "positive count");
}

std::string closest(const std::string& typed, const std::vector<std::string>& candidates) {
    std::string best;
    std::size_t best_distance = 0;
    for (const auto& candidate : candidates) {
        // Leading dashes are the same in every candidate of one kind: measure the word itself.
        const auto bare_typed = without_dashes(typed);
        const auto bare_candidate = without_dashes(candidate);
        std::size_t distance = typing_distance(bare_typed, bare_candidate);
        if (bare_typed.size() >= 2 && bare_candidate.starts_with(bare_typed)) {
            distance = 1;
        }
        const std::size_t allowed = std::max<std::size_t>(1, bare_candidate.size() / 3);
        if (distance <= allowed && (best.empty() || distance < best_distance)) {
            best = candidate;
            best_distance = distance;
        }
    }
    return best;
}

std::string explain_unknown_word(CLI::App& app, int argc, const char* const* argv) {
    CLI::App* command = &app;
    for (int i = 1; i < argc; ++i) {
        const std::string word = argv[i];
        if (word == "--") {
            break;
        }
        if (word.size() > 1 && word[0] == '-') {
            const auto name = word.substr(0, word.find('='));
            // `-abc` is a bundle of short flags; only a long name is checked whole.
            const bool long_name = name.starts_with("--");
            const auto* option =
                long_name || name.size() == 2 ? option_named(*command, name) : nullptr;
            if (option == nullptr && (long_name || name.size() == 2)) {
                return fmt::format(
                    "unknown option '{}' for '{}'; {}", shown(name), command_path(*command),
                    did_you_mean(name, option_names(*command),
                                 fmt::format("see '{} --help'", command_path(*command))));
            }
            if (option != nullptr && option->get_expected_min() > 0 &&
                word.find('=') == std::string::npos) {
                ++i;  // its value, which may look like anything
            }
            continue;
        }
        if (auto* sub = command_named(*command, word)) {
            command = sub;
            continue;
        }
        if (command->get_require_subcommand_min() > 0) {
            const auto names = command_names(*command);
            return fmt::format(
                "unknown command '{}' for '{}'; {}", shown(word), command_path(*command),
                did_you_mean(word, names,
                             fmt::format("the commands are: {}", fmt::join(names, ", "))));
        }
        // A positional argument of a command that takes them.
    }
    if (command->get_require_subcommand_min() > 0) {
        return fmt::format("'{}' needs a command, one of: {} (see '{} --help')",
                           command_path(*command), fmt::join(command_names(*command), ", "),
                           command_path(*command));
    }
    return {};
}

}  // namespace maf_sandbox::cli
