// The acas-emulator command line. Hand-written (CLI11 belongs to src/cli): two subcommands with
// a handful of flags each.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <fmt/format.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/emulator/emulator.hpp"
#include "maf_sandbox/runtime/kernel/state_dir.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "registry_standin.hpp"
#include "state_store.hpp"

namespace maf_sandbox::emulator {
namespace {

constexpr const char* kUsage = R"(usage:
  acas-emulator serve --listen 127.0.0.1:PORT --state-dir DIR
                      [--tls-cert FILE --tls-key FILE | --self-signed]
                      [--token TOKEN | --no-token] [--allow-remote]
                      [--public-metrics]
                      [--alias NAME=IMAGE]... [--page-size N] [--deleting-ms N]
                      [--image-max-bytes N] [--image-max-entries N] [--image-max-depth N]
                      [--image-min-free-percent N]
                      [--max-list-entries N] [--max-list-bytes N] [--file-budget-bytes N]
                      [--fault-429-rate P] [--fault-retry-after-ms N] [--fault-403-first N]
                      [--fault-403-ms N] [--fault-5xx-rate P] [--fault-latency-ms N]
                      [--fault-create-delay-ms N] [--fault-drop-rate P] [--fault-seed N]
                      [--fault-only "METHOD /path/{id}/..."]
                      [--impersonate-service --issuer-key FILE --tenant ID [--audience URL]]
  acas-emulator images add ARCHIVE --ref REGISTRY/REPO:TAG --state-dir DIR

--listen on an address other than loopback (127.0.0.0/8, ::1, localhost) needs both
--token and --allow-remote: whoever reaches the emulator runs code in its sandboxes.
Without --token, a token is generated and written to DIR/token (mode 0600): every other user
of this host can reach a loopback port, so the data plane is never open by default. --no-token
accepts any bearer token (loopback only): for a single-user machine.
--state-dir must be owned by the emulator's user and writable by nobody else.
--deleting-ms: how long a deleted sandbox stays listed as Deleting before GET answers 404
(default 2000).
--image-max-bytes, --image-max-entries, --image-max-depth: caps on what one disk-image import
unpacks (defaults 17179869184 bytes, 1000000 entries, 256 path components); an import also stops
before the state disk has less than --image-min-free-percent (default 5) of its bytes or inodes
free. A refused import ends Failed.
--max-list-entries / --max-list-bytes: the most entries (default 20000) and answer bytes
(default 8388608) one files/list answers; a larger directory is refused 413 ListingTooLarge.
--file-budget-bytes: the most bytes every file-plane request together holds in the emulator's
memory (default 268435456, at least 1048576); past it a request waits up to a second, then is
answered 429 with Retry-After.
--impersonate-service is for tests only: the emulator then plays the real service for a client in
real-service mode. It sends no x-acas-emulator header, answers none of its own routes (/healthz,
/metrics, /admin/faults) and lets in only Entra ID access tokens: RS256 JWTs signed by the key in
--issuer-key (a PEM public key or certificate), with aud --audience (default
https://dynamicsessions.io), tid and iss naming --tenant, not expired. It needs --tls-cert and
--tls-key (a certificate for the regional name) and excludes --token; off loopback it still needs
--allow-remote.
The first line on stdout is `listening on https://HOST:PORT`; logs go to stderr.
Faults can also be read and replaced while serving: GET/PUT /admin/faults (JSON; the same
bearer token as the data plane). GET /metrics needs that token too, unless --public-metrics.
)";

[[noreturn]] void usage_error(const std::string& message) {
    throw InvalidArgument(fmt::format("{}\n{}", message, kUsage));
}

double parse_rate(const std::string& flag, const std::string& text) {
    try {
        std::size_t used = 0;
        const double v = std::stod(text, &used);
        if (used == text.size() && v >= 0.0 && v <= 1.0) {
            return v;
        }
    } catch (...) {
    }
    usage_error(fmt::format("{} takes a probability between 0 and 1, not '{}'", flag, text));
}

std::uint64_t parse_count(const std::string& flag, const std::string& text) {
    try {
        std::size_t used = 0;
        const auto v = std::stoull(text, &used);
        if (used == text.size()) {
            return v;
        }
    } catch (...) {
    }
    usage_error(fmt::format("{} takes a non-negative integer, not '{}'", flag, text));
}

// Loopback: an address in 127.0.0.0/8 or ::1, or the name localhost.
bool is_loopback_host(const std::string& host) {
    std::string bare = host;
    if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') {
        bare = bare.substr(1, bare.size() - 2);
    }
    if (bare == "localhost") {
        return true;
    }
    boost::system::error_code ec;
    const auto address = boost::asio::ip::make_address(bare, ec);
    return !ec && address.is_loopback();
}

// The emulator runs a client's commands as root-launched sandboxes: reachable from other hosts
// only when the operator says so twice, by a token and by --allow-remote.
void check_remote_listen(const std::string& host, const std::optional<std::string>& token,
                         bool allow_remote) {
    if (is_loopback_host(host)) {
        return;
    }
    if (!token || token->empty()) {
        usage_error(fmt::format(
            "--listen {}: not a loopback address, and without --token every client is let in; "
            "listen on 127.0.0.1, or give --token TOKEN and --allow-remote",
            host));
    }
    if (!allow_remote) {
        usage_error(fmt::format(
            "--listen {}: not a loopback address, and whoever reaches it runs code in the "
            "emulator's sandboxes; listen on 127.0.0.1, or add --allow-remote (every request "
            "then still needs the token)",
            host));
    }
}

// A fresh bearer token, written to `token` in the state directory (descriptor-relative, never
// through a link, 0600) for the clients of the user who started the emulator.
std::string write_generated_token(int state_fd) {
    const auto token = random_hex(32);
    runtime::UniqueFd fd(
        ::openat(state_fd, "token", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    const auto line = token + "\n";
    if (!fd || ::fchmod(fd.get(), 0600) != 0 ||
        ::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        throw SystemError(errno, "writing the generated token to the state directory",
                          "give --token TOKEN, or make the state directory writable");
    }
    return token;
}

// --impersonate-service's rules, read and checked before anything is served.
ServiceImpersonation impersonation_rules(const EmulatorOptions& options,
                                         const std::optional<std::string>& issuer_key,
                                         const std::optional<std::string>& tenant,
                                         const std::optional<std::string>& audience) {
    if (!issuer_key || !tenant) {
        usage_error("--impersonate-service needs --issuer-key FILE and --tenant ID");
    }
    if (options.token) {
        usage_error(
            "--impersonate-service and --token are exclusive: the service takes Entra ID "
            "tokens only");
    }
    if (!options.tls_cert || options.plain_http) {
        usage_error(
            "--impersonate-service needs --tls-cert and --tls-key (the regional name's "
            "certificate)");
    }
    std::ifstream stream(*issuer_key, std::ios::binary);
    std::ostringstream contents;
    contents << stream.rdbuf();
    if (!stream) {
        usage_error(fmt::format("--issuer-key {}: cannot read the file", *issuer_key));
    }
    ServiceImpersonation rules;
    rules.issuer_key_pem = contents.str();
    rules.tenant = *tenant;
    if (audience) {
        rules.audience = *audience;
    }
    return rules;
}

class Args {
  public:
    Args(int argc, char** argv, int start) {
        for (int i = start; i < argc; ++i) {
            items_.emplace_back(argv[i]);
        }
    }
    bool done() const { return pos_ >= items_.size(); }
    std::string next() { return items_[pos_++]; }
    std::string value(const std::string& flag) {
        if (done()) {
            usage_error(fmt::format("{} needs a value", flag));
        }
        return next();
    }

  private:
    std::vector<std::string> items_;
    std::size_t pos_ = 0;
};

int serve(Args args) {
    EmulatorOptions options;
    bool self_signed = false;
    bool listen_given = false;
    bool allow_remote = false;
    bool any_token = false;
    bool impersonate = false;
    std::optional<std::string> issuer_key, tenant, audience;
    while (!args.done()) {
        const auto flag = args.next();
        if (flag == "--listen") {
            const auto text = args.value(flag);
            const auto colon = text.rfind(':');
            if (colon == std::string::npos) {
                usage_error("--listen takes HOST:PORT, e.g. 127.0.0.1:0");
            }
            options.host = text.substr(0, colon);
            const auto port = parse_count(flag, text.substr(colon + 1));
            if (port > 65535) {
                usage_error("--listen port must be at most 65535");
            }
            options.port = static_cast<std::uint16_t>(port);
            listen_given = true;
        } else if (flag == "--state-dir") {
            options.state_dir = args.value(flag);
        } else if (flag == "--tls-cert") {
            options.tls_cert = args.value(flag);
        } else if (flag == "--tls-key") {
            options.tls_key = args.value(flag);
        } else if (flag == "--self-signed") {
            self_signed = true;
        } else if (flag == "--plain-http") {
            options.plain_http = true;
        } else if (flag == "--token") {
            options.token = args.value(flag);
        } else if (flag == "--no-token") {
            any_token = true;
        } else if (flag == "--impersonate-service") {
            impersonate = true;
        } else if (flag == "--issuer-key") {
            issuer_key = args.value(flag);
        } else if (flag == "--tenant") {
            tenant = args.value(flag);
        } else if (flag == "--audience") {
            audience = args.value(flag);
        } else if (flag == "--allow-remote") {
            allow_remote = true;
        } else if (flag == "--public-metrics") {
            options.public_metrics = true;
        } else if (flag == "--alias") {
            const auto text = args.value(flag);
            const auto eq = text.find('=');
            if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
                usage_error("--alias takes NAME=IMAGE, e.g. python-3.13=host");
            }
            options.aliases[text.substr(0, eq)] = text.substr(eq + 1);
        } else if (flag == "--page-size") {
            options.default_page_size =
                std::max<std::uint64_t>(1, parse_count(flag, args.value(flag)));
        } else if (flag == "--deleting-ms") {
            const auto ms = parse_count(flag, args.value(flag));
            if (ms > 24ull * 3600 * 1000) {
                usage_error("--deleting-ms must be at most a day (86400000)");
            }
            options.deleting_retention = std::chrono::milliseconds(ms);
        } else if (flag == "--image-max-bytes") {
            options.image_limits.max_bytes = parse_count(flag, args.value(flag));
        } else if (flag == "--image-max-entries") {
            options.image_limits.max_entries = parse_count(flag, args.value(flag));
        } else if (flag == "--image-max-depth") {
            options.image_limits.max_depth = parse_count(flag, args.value(flag));
        } else if (flag == "--image-min-free-percent") {
            options.image_limits.min_free_percent = parse_count(flag, args.value(flag));
            if (options.image_limits.min_free_percent > 100) {
                usage_error("--image-min-free-percent is a percentage, at most 100");
            }
        } else if (flag == "--max-list-entries") {
            options.file_limits.max_list_entries =
                std::max<std::uint64_t>(1, parse_count(flag, args.value(flag)));
        } else if (flag == "--max-list-bytes") {
            options.file_limits.max_list_bytes =
                std::max<std::uint64_t>(1024, parse_count(flag, args.value(flag)));
        } else if (flag == "--file-budget-bytes") {
            const auto bytes = parse_count(flag, args.value(flag));
            if (bytes < options.file_limits.read_chunk_bytes) {
                usage_error("--file-budget-bytes must be at least 1048576 (one read piece)");
            }
            options.file_limits.in_flight_bytes = bytes;
        } else if (flag == "--fault-429-rate") {
            options.faults.rate_429 = parse_rate(flag, args.value(flag));
        } else if (flag == "--fault-403-first") {
            options.faults.first_403 = parse_count(flag, args.value(flag));
        } else if (flag == "--fault-403-ms") {
            options.faults.forbidden_ms = parse_count(flag, args.value(flag));
        } else if (flag == "--fault-retry-after-ms") {
            options.faults.retry_after_ms = parse_count(flag, args.value(flag));
        } else if (flag == "--fault-5xx-rate") {
            options.faults.rate_5xx = parse_rate(flag, args.value(flag));
        } else if (flag == "--fault-latency-ms") {
            options.faults.latency_ms = parse_count(flag, args.value(flag));
        } else if (flag == "--fault-create-delay-ms") {
            options.faults.create_delay_ms = parse_count(flag, args.value(flag));
        } else if (flag == "--fault-drop-rate") {
            options.faults.drop_rate = parse_rate(flag, args.value(flag));
        } else if (flag == "--fault-only") {
            options.faults.only = args.value(flag);
        } else if (flag == "--fault-seed") {
            options.faults.seed = parse_count(flag, args.value(flag));
        } else {
            usage_error(fmt::format("unknown flag '{}'", flag));
        }
    }
    if (!listen_given) {
        usage_error("serve needs --listen HOST:PORT");
    }
    if (options.state_dir.empty()) {
        usage_error("serve needs --state-dir DIR");
    }
    if (options.tls_cert.has_value() != options.tls_key.has_value()) {
        usage_error("--tls-cert and --tls-key go together");
    }
    if (self_signed && options.tls_cert) {
        usage_error("--self-signed and --tls-cert are exclusive");
    }
    if (any_token && options.token) {
        usage_error("--token and --no-token are exclusive");
    }
    if (impersonate) {
        options.impersonation = impersonation_rules(options, issuer_key, tenant, audience);
    } else if (issuer_key || tenant || audience) {
        usage_error("--issuer-key, --tenant and --audience go with --impersonate-service");
    }
    check_remote_listen(options.host,
                        impersonate ? std::optional<std::string>("entra") : options.token,
                        allow_remote);
    const auto state_fd =
        runtime::open_trusted_state_dir(options.state_dir, 0700, kEmulatorStateAdvice);
    // The impersonated service takes Entra ID tokens only; otherwise a token is never optional.
    const bool generated_token = !options.token && !any_token && !impersonate;
    if (generated_token) {
        options.token = write_generated_token(state_fd.get());
    }

    auto logger = std::make_shared<spdlog::logger>(
        "acas-emulator", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
    logger->flush_on(spdlog::level::info);

    if (generated_token) {
        logger->info(
            "no --token given: clients must send the bearer token written to {} "
            "(e.g. ACAS_SANDBOX_TOKEN=$(cat {}))",
            (options.state_dir / "token").string(), (options.state_dir / "token").string());
    } else if (any_token) {
        logger->warn("--no-token: any bearer token is accepted, from every user of this host");
    }
    boost::asio::io_context io;
    Emulator emulator(io.get_executor(), std::move(options), logger);
    emulator.start();
    // The one line on stdout: what scripts and tests wait for.
    std::cout << "listening on " << emulator.base_url() << std::endl;

    boost::asio::signal_set signals(io, SIGTERM, SIGINT);
    signals.async_wait([&](const boost::system::error_code& ec, int signal) {
        if (ec) {
            return;
        }
        logger->info("signal {} received: shutting down gracefully", signal);
        boost::asio::co_spawn(
            io,
            [&]() -> Task<void> {
                co_await emulator.stop(Seconds(10));
                io.stop();
            },
            boost::asio::detached);
    });
    io.run();
    // Every change is already persisted; a worker thread may still be blocked in a long guest
    // command, which must not hold the exit (the command keeps running in its sandbox).
    logger->flush();
    std::fflush(nullptr);
    std::_Exit(0);
}

int images(Args args) {
    if (args.done() || args.next() != "add") {
        usage_error("images takes the subcommand `add`");
    }
    std::optional<std::string> archive;
    std::optional<std::string> ref;
    std::optional<std::string> state_dir;
    while (!args.done()) {
        const auto item = args.next();
        if (item == "--ref") {
            ref = args.value(item);
        } else if (item == "--state-dir") {
            state_dir = args.value(item);
        } else if (!item.starts_with("--") && !archive) {
            archive = item;
        } else {
            usage_error(fmt::format("unexpected argument '{}'", item));
        }
    }
    if (!archive || !ref || !state_dir) {
        usage_error("images add needs ARCHIVE, --ref REGISTRY/REPO:TAG and --state-dir DIR");
    }
    (void)runtime::open_trusted_state_dir(*state_dir, 0700, kEmulatorStateAdvice);
    RegistryStandIn registry(*state_dir);
    registry.add(*archive, *ref);
    std::cerr << fmt::format("{} can now be imported with PUT .../diskimages (image.base)\n", *ref);
    return 0;
}

}  // namespace

int emulator_main(int argc, char** argv) {
    try {
        if (argc < 2) {
            usage_error("missing subcommand");
        }
        const std::string command = argv[1];
        if (command == "serve") {
            return serve(Args(argc, argv, 2));
        }
        if (command == "images") {
            return images(Args(argc, argv, 2));
        }
        if (command == "--help" || command == "-h" || command == "help") {
            std::cerr << kUsage;
            return 0;
        }
        usage_error(fmt::format("unknown subcommand '{}'", command));
    } catch (const Error& e) {
        std::cerr << "acas-emulator: " << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "acas-emulator: " << e.what() << "\n";
        return 1;
    }
}

}  // namespace maf_sandbox::emulator
