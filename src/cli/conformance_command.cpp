// `maf-sandbox conformance`: acquires a sandbox from one backend through the router and runs every
// conformance suite the backend declares against it. Results go to stdout, one line per probe and
// a summary line last; logs go to stderr.
#include <fmt/format.h>
#include <spdlog/logger.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "backends.hpp"
#include "cli.hpp"
#include "maf_sandbox/core/conformance.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/in_process.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox::cli {
namespace {

constexpr const char* kConformanceKind = "conformance";

struct ConformanceOptions {
    std::string backend;
    std::string floor = "microvm";
    std::string image;
    std::string allowed_url;
    std::string denied_url;
    BackendOptions backend_options;
};

// The host part of an http(s) URL, for the spec's egress allowlist.
std::string url_host(const std::string& url) {
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string::npos) {
        throw InvalidArgument(fmt::format(
            "--allowed-url '{}' is not an absolute URL; pass one like https://example.com/", url));
    }
    auto authority = url.substr(scheme_end + 3);
    authority = authority.substr(0, authority.find_first_of("/?#"));
    authority = authority.substr(authority.find('@') + 1);  // npos + 1 == 0: no user info
    auto host = authority.substr(0, authority.rfind(':'));
    if (host.empty()) {
        throw InvalidArgument(fmt::format(
            "--allowed-url '{}' names no host; pass one like https://example.com/", url));
    }
    return host;
}

// Only the capabilities the suites use and the backend declares: the spec asks for what will be
// probed, so the router's capability check never refuses a backend for a suite it will skip.
std::set<Capability> suite_capabilities(const BackendDeclarations& declarations) {
    std::set<Capability> wanted;
    for (const auto capability : {Capability::exec, Capability::files_in, Capability::files_out,
                                  Capability::files_list, Capability::files_delete}) {
        if (declarations.declares(capability)) {
            wanted.insert(capability);
        }
    }
    return wanted;
}

SandboxSpec conformance_spec(const ConformanceOptions& options,
                             const BackendDeclarations& declarations,
                             const std::optional<EgressUrls>& urls) {
    SandboxSpecFields fields;
    fields.kind = kConformanceKind;
    if (!options.image.empty()) {
        fields.image = options.image;
    }
    fields.requires_capabilities = suite_capabilities(declarations);
    if (urls) {
        fields.egress = Egress::allowlist;
        fields.egress_allow = {url_host(urls->allowed_url)};
    }
    return SandboxSpec(std::move(fields));
}

void print_results(const std::vector<ProbeResult>& results) {
    int passed = 0;
    int failed = 0;
    int skipped = 0;
    for (const auto& result : results) {
        std::string_view word;
        const std::string* text = &result.detail;
        switch (result.status) {
            case ProbeStatus::passed:
                word = "PASS";
                text = &result.why;
                ++passed;
                break;
            case ProbeStatus::failed:
                word = "FAIL";
                ++failed;
                break;
            case ProbeStatus::skipped:
                word = "SKIP";
                ++skipped;
                break;
        }
        std::cout << fmt::format("{} {} {} {}\n", result.suite, result.name, word, *text);
    }
    std::cout << fmt::format("{} passed, {} failed, {} skipped\n", passed, failed, skipped);
    std::cout.flush();
}

// Runs the suites and disposes the sandbox whatever happens; rethrows after disposal.
Task<std::vector<ProbeResult>> acquire_and_probe(SandboxRouter& router, SandboxKey key,
                                                 SandboxSpec spec, std::optional<EgressUrls> urls,
                                                 spdlog::logger& log) {
    auto sandbox = co_await router.acquire(key, spec);
    const auto declarations = router.backend()->declarations();
    std::exception_ptr failure;
    std::vector<ProbeResult> results;
    try {
        const auto capabilities = declarations.capabilities;
        const auto base = spec->work_dir.value_or(sandbox->base_directory());
        std::string working_directory = base;
        std::unique_ptr<ConformanceSubject> subject;
        // The fake can be planted natively; every other backend plants through its own guest,
        // beneath the base: the suites plant a sibling `<work>-outside`, and the base's parent
        // (root-owned `/maf-sandbox` on ACAS) is not the guest's to write.
        if (auto fake = std::dynamic_pointer_cast<InProcessSandbox>(sandbox)) {
            subject = std::make_unique<InProcessSubject>(fake, working_directory, capabilities);
        } else {
            working_directory = join_guest_path(base, "conformance");
            subject = std::make_unique<PosixGuestSubject>(sandbox, working_directory, capabilities);
        }
        log.info("probing backend '{}' in {}", router.backend()->name(), working_directory);
        results = co_await run_declared_suites(*subject, declarations, urls);
    } catch (...) {
        failure = std::current_exception();
    }
    if (const auto undisposed = co_await router.dispose(key, spec->kind)) {
        log.warn("the conformance sandbox was not disposed ({}): {}", to_string(undisposed->code),
                 undisposed->detail);
    }
    if (failure) {
        std::rethrow_exception(failure);
    }
    co_return results;
}

int run_conformance(const ConformanceOptions& options, Context& context) {
    if (options.allowed_url.empty() != options.denied_url.empty()) {
        throw InvalidArgument(
            "--allowed-url and --denied-url go together: pass both to run the EGRESS suite, or "
            "neither to skip it");
    }
    const auto floor = parse_isolation(options.floor);
    auto backend = make_backend(options.backend, options.backend_options);
    if (!meets_floor(backend->isolation(), floor)) {
        throw SandboxBackendNotPermitted(fmt::format(
            "--backend {} provides isolation '{}', below the floor '{}'; pass --floor {} to "
            "consent to that rung",
            options.backend, to_string(backend->isolation()), options.floor,
            to_string(backend->isolation())));
    }
    std::optional<EgressUrls> urls;
    if (!options.allowed_url.empty()) {
        urls = EgressUrls{options.allowed_url, options.denied_url};
    }
    SandboxRouterOptions router_options;
    router_options.min_isolation = floor;
    router_options.log = context.log;
    SandboxRouter router({backend}, router_options);

    auto spec_options = options;
    if (spec_options.image.empty()) {
        spec_options.image = default_image_for(*backend);
    }
    const auto spec = conformance_spec(spec_options, backend->declarations(), urls);
    router.ensure_can_serve(spec);
    const SandboxKey key{"conformance", fmt::format("conformance-{}", ::getpid()), "cli", ""};

    boost::asio::io_context io;
    std::vector<ProbeResult> results;
    try {
        results = run_blocking(io, acquire_and_probe(router, key, spec, urls, *context.log));
    } catch (...) {
        try {
            run_blocking(io, backend->close());
        } catch (const std::exception& error) {
            context.log->warn("closing backend '{}': {}", options.backend, error.what());
        }
        throw;
    }
    run_blocking(io, backend->close());
    print_results(results);
    const bool any_failed = std::any_of(results.begin(), results.end(), [](const auto& result) {
        return result.status == ProbeStatus::failed;
    });
    return any_failed ? kExitNo : kExitOk;
}

}  // namespace

void add_conformance_command(CLI::App& app, Context& context) {
    auto options = std::make_shared<ConformanceOptions>();
    auto* command = app.add_subcommand(
        "conformance",
        "Acquire a sandbox from one backend through the router and run every conformance suite "
        "the backend declares; prints one line per probe and a summary");
    command->add_option("--backend", options->backend, "Backend to probe (in-process)")->required();
    command
        ->add_option("--floor", options->floor,
                     "Isolation floor the backend's rung must meet (none, runtime, os_process, "
                     "container, hardened_container, microvm, vm)")
        ->capture_default_str();
    command->add_option("--image", options->image, "Guest image, for backends that need one");
    add_backend_options(*command, options->backend_options);
    command->add_option("--allowed-url", options->allowed_url,
                        "A URL the guest must reach (runs the EGRESS suite with --denied-url)");
    command->add_option("--denied-url", options->denied_url,
                        "A URL the guest must not reach (runs the EGRESS suite with "
                        "--allowed-url)");
    command->callback(
        [options, &context] { context.exit_code = run_conformance(*options, context); });
}

}  // namespace maf_sandbox::cli
