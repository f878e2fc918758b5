#include "lean_args.hpp"

#include <charconv>
#include <cstring>
#include <set>
#include <string_view>

#include "../exec_env.hpp"
#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::cli::lean {

namespace {

// Plain positive decimal integers only: anything else goes to the full CLI's validation.
std::optional<std::uint64_t> positive_integer(std::string_view text) {
    std::uint64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() || value == 0) {
        return std::nullopt;
    }
    return value;
}

// Digits with an optional fraction, above zero.
std::optional<double> positive_seconds(std::string_view text) {
    const auto dot = text.find('.');
    const auto whole = text.substr(0, dot);
    const auto fraction = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
    const auto digits = [](std::string_view part) {
        return part.find_first_not_of("0123456789") == std::string_view::npos;
    };
    if (whole.empty() || !digits(whole) || !digits(fraction) ||
        (dot != std::string_view::npos && fraction.empty()) || whole.size() > 9) {
        return std::nullopt;
    }
    double value = 0;
    for (const char c : whole) {
        value = value * 10 + (c - '0');
    }
    double scale = 0.1;
    for (const char c : fraction) {
        value += (c - '0') * scale;
        scale /= 10;
    }
    if (value <= 0) {
        return std::nullopt;
    }
    return value;
}

bool assign(LeanArgs& args, std::string_view name, std::string_view value) {
    if (value.empty()) {
        return false;
    }
    const bool exec = args.command == "exec";
    if (name == "--backend") {
        return value == "local";
    }
    if (name == "--egress") {
        return value == "closed";
    }
    if (name == "--floor") {
        args.floor = value;
        return true;
    }
    if (name == "--image") {
        args.image = value;
        return true;
    }
    if (name == "--timeout") {
        const auto seconds = positive_seconds(value);
        args.timeout = seconds.value_or(0);
        return seconds.has_value();
    }
    std::optional<std::uint64_t>* limit = name == "--memory" ? &args.memory
                                          : name == "--pids" ? &args.pids
                                          : name == "--disk" ? &args.disk
                                                             : nullptr;
    if (limit != nullptr || name == "--max-output") {
        const auto number = positive_integer(value);
        if (!number) {
            return false;
        }
        if (limit != nullptr) {
            *limit = *number;
        } else {
            args.max_output = *number;
        }
        return true;
    }
    std::string* text = !exec                ? nullptr
                        : name == "--scope"  ? &args.scope
                        : name == "--thread" ? &args.thread
                        : name == "--agent"  ? &args.agent
                        : name == "--kind"   ? &args.kind
                                             : nullptr;
    if (text == nullptr) {
        return false;
    }
    *text = value;
    return true;
}

}  // namespace

std::optional<LeanArgs> parse_lean_args(int argc, char** argv) {
    if (argc < 2 || (std::strcmp(argv[1], "run") != 0 && std::strcmp(argv[1], "exec") != 0)) {
        return std::nullopt;
    }
    LeanArgs args;
    args.command = argv[1];
    std::set<std::string_view> seen;
    std::vector<std::string> env_pairs, env_files;
    int i = 2;
    for (; i < argc; ++i) {
        const std::string_view token = argv[i];
        if (token == "--") {
            break;
        }
        if (token == "-e" && i + 1 < argc && argv[i + 1][0] != '-') {
            env_pairs.emplace_back(argv[++i]);
            continue;
        }
        if (!token.starts_with("--")) {
            return std::nullopt;
        }
        std::string_view name = token;
        std::string_view value;
        if (name == "--env" || name == "--env-file") {
            // `--env KEY=VALUE`: the first '=' belongs to the value, never to the flag.
            if (i + 1 >= argc || argv[i + 1][0] == '-') {
                return std::nullopt;
            }
            value = argv[++i];
        } else if (const auto eq = token.find('='); eq != std::string_view::npos) {
            name = token.substr(0, eq);
            value = token.substr(eq + 1);
        } else if (i + 1 < argc && argv[i + 1][0] != '-') {
            value = argv[++i];
        } else {
            return std::nullopt;
        }
        // Repeatable, like -e.
        if (name == "--env" || name == "--env-file") {
            (name == "--env-file" ? env_files : env_pairs).emplace_back(value);
            continue;
        }
        // A flag given twice: the full CLI decides what that means.
        if (!seen.insert(name).second || !assign(args, name, value)) {
            return std::nullopt;
        }
    }
    for (++i; i < argc; ++i) {
        args.argv.emplace_back(argv[i]);
    }
    if (args.argv.empty() ||
        (args.command == "exec" && (args.scope.empty() || args.thread.empty()))) {
        return std::nullopt;
    }
    try {
        args.environment = exec_environment(env_pairs, env_files);
    } catch (const InvalidArgument&) {
        return std::nullopt;  // the full CLI names the bad entry
    }
    return args;
}

}  // namespace maf_sandbox::cli::lean
