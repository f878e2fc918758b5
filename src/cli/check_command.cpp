// `maf-sandbox check`: would the router attach this spec? Runs exactly the router's construction
// and attach checks (SandboxRouter::ensure_can_serve) against the named backends' declarations,
// without acquiring anything.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <vector>

#include "backends.hpp"
#include "cli.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/spec_json.hpp"

namespace maf_sandbox::cli {
namespace {

// Until the local backend lands, the default is the in-process fake (rung none), which the
// default floor (microvm) refuses: pass --floor none to see a spec served by it.
constexpr const char* kDefaultBackend = "in-process";
constexpr const char* kDefaultFloor = "microvm";

struct CheckOptions {
    std::string spec_path;
    std::string floor = kDefaultFloor;
    std::vector<std::string> backends;
};

struct CheckInput {
    Isolation floor;
    std::optional<SandboxSpec> spec;
    std::vector<std::shared_ptr<SandboxBackend>> backends;
};

// A spec is a small JSON document: anything larger is a mistake (or /dev/zero), not a spec.
constexpr std::size_t kMaxSpecBytes = 1024 * 1024;

// Reads at most kMaxSpecBytes from `fd`; refuses a longer input without reading the rest.
std::string read_capped(int fd, const std::string& shown) {
    std::string content;
    char chunk[65536];
    for (;;) {
        const auto n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            throw InvalidArgument(fmt::format(
                "option '--spec': cannot read '{}': {}; pass the path of a readable JSON file",
                shown, std::strerror(errno)));
        }
        if (n == 0) {
            return content;
        }
        content.append(chunk, static_cast<std::size_t>(n));
        if (content.size() > kMaxSpecBytes) {
            throw InvalidArgument(fmt::format(
                "option '--spec': '{}' is larger than the {} byte (1 MiB) limit for a spec; pass "
                "a smaller JSON file",
                shown, kMaxSpecBytes));
        }
    }
}

// A regular file, or `-` for standard input: never a device, FIFO or directory (which may never
// end, or block before the first byte).
std::string read_spec_file(const std::string& path) {
    if (path == "-") {
        return read_capped(STDIN_FILENO, "standard input");
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        throw InvalidArgument(fmt::format(
            "option '--spec': cannot read '{}': {}; pass the path of a readable JSON file", path,
            std::strerror(errno)));
    }
    struct FdCloser {
        int fd;
        ~FdCloser() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        throw InvalidArgument(fmt::format(
            "option '--spec': '{}' is not a regular file; pass a JSON file, or - for standard "
            "input",
            path));
    }
    if (static_cast<std::uint64_t>(st.st_size) > kMaxSpecBytes) {
        throw InvalidArgument(fmt::format(
            "option '--spec': '{}' is larger than the {} byte (1 MiB) limit for a spec; pass a "
            "smaller JSON file",
            path, kMaxSpecBytes));
    }
    return read_capped(fd, path);
}

// Everything the user typed, validated before any policy check runs: a bad floor, spec or
// backend name is bad input (exit 2), never a refusal.
CheckInput read_input(const CheckOptions& options) {
    CheckInput input{};
    try {
        input.floor = parse_isolation(options.floor);
    } catch (const InvalidArgument& e) {
        throw InvalidArgument(fmt::format("option '--floor': {}", e.what()));
    }
    input.spec.emplace(parse_spec_json(read_spec_file(options.spec_path)));
    const auto names =
        options.backends.empty() ? std::vector<std::string>{kDefaultBackend} : options.backends;
    for (const auto& name : names) {
        std::shared_ptr<SandboxBackend> backend;
        try {
            backend = make_backend(name);
        } catch (const InvalidArgument& e) {
            throw InvalidArgument(fmt::format("option '--backend': {}", e.what()));
        }
        if (!backend) {
            throw InvalidArgument(fmt::format("option '--backend': no backend named '{}'", name));
        }
        input.backends.push_back(std::move(backend));
    }
    return input;
}

int run_check(const CheckOptions& options, Context& context) {
    std::optional<CheckInput> input;
    try {
        input.emplace(read_input(options));
    } catch (const InvalidArgument& e) {
        context.log->error("{}", e.what());
        return kExitFailed;
    }

    try {
        SandboxRouterOptions router_options;
        router_options.min_isolation = input->floor;
        router_options.log = context.log;
        // As the protocol does: the router selects the first backend named; the others are
        // registered (and would receive disposals) but never checked and never fallen back to.
        SandboxRouter router(input->backends, std::move(router_options));
        router.ensure_can_serve(*input->spec);
        std::cout << fmt::format("served by {} ({})", router.backend()->name(),
                                 to_string(router.backend()->isolation()))
                  << std::endl;
        return kExitOk;
    } catch (const Error& e) {
        std::cout << fmt::format("refused: {}: {}", e.type_name(), e.what()) << std::endl;
        return kExitNo;
    }
}

}  // namespace

void add_check_command(CLI::App& app, Context& context) {
    auto options = std::make_shared<CheckOptions>();
    auto* command = app.add_subcommand(
        "check",
        "Run the router's attach checks for a JSON spec against the named backends' "
        "declarations. Prints 'served by NAME (RUNG)' and exits 0, or prints the refusal's error "
        "type and message and exits 1; bad input (flags, JSON, unknown names) exits 125, as "
        "every command's own failure does.");
    command
        ->add_option("--spec", options->spec_path,
                     "The spec as JSON (docs/protocol.md 2.5 field names, snake_case; `requires` "
                     "for the required capabilities; enums as lowercase strings): a regular "
                     "file of at most 1 MiB, or - for standard input")
        ->required();
    command
        ->add_option("--floor", options->floor,
                     "The host's isolation floor: none, runtime, os_process, container, "
                     "hardened_container, microvm or vm")
        ->capture_default_str();
    command->add_option("--backend", options->backends,
                        "A backend to register; repeat to register several. The router selects "
                        "the first one and never falls back to the others. Default: in-process");
    command->callback([options, &context] { context.exit_code = run_check(*options, context); });
}

}  // namespace maf_sandbox::cli
