#include "backends.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>

#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/in_process.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/runtime/host/host_checks.hpp"
#include "maf_sandbox/runtime/host/images.hpp"

namespace maf_sandbox::cli {

namespace {
// One line per backend; keep the refusal message below in step.
constexpr const char* kInProcess = "in-process";
constexpr const char* kLocal = "local";
constexpr const char* kAcas = "acas";

std::string or_environment(const std::string& value, const char* variable) {
    if (!value.empty())
        return value;
    const char* from_environment = std::getenv(variable);
    return from_environment ? std::string(from_environment) : std::string();
}

std::shared_ptr<maf_sandbox::SandboxBackend> make_acas_backend(const BackendOptions& options) {
    acas::AcasSandboxConfig config;
    config.endpoint = or_environment(options.endpoint, "ACAS_SANDBOX_ENDPOINT");
    config.subscription_id =
        or_environment(options.subscription_id, "ACAS_SANDBOX_SUBSCRIPTION_ID");
    config.resource_group = or_environment(options.resource_group, "ACAS_SANDBOX_RESOURCE_GROUP");
    config.sandbox_group = or_environment(options.sandbox_group, "ACAS_SANDBOX_GROUP");
    config.registry = or_environment(options.registry, "ACAS_SANDBOX_REGISTRY");
    if (auto ca = or_environment(options.ca_file, "ACAS_SANDBOX_CA_FILE"); !ca.empty())
        config.ca_file = ca;
    if (auto token = or_environment(options.token, "ACAS_SANDBOX_TOKEN"); !token.empty())
        config.token = token;
    config.emulator = options.emulator;
    if (config.emulator_mode()) {
        // An emulator is a local process that answers at once; the service's 3-second poll
        // would only make every create and delete wait.
        config.poll_interval = Seconds{0.2};
    }
    auto backend = std::make_shared<acas::AcasBackend>(std::move(config));
    if (backend->isolation() == Isolation::none) {
        // Emulator mode: learn the rung the emulator names before any router reads isolation().
        boost::asio::io_context io;
        run_blocking(io, backend->discover());
    }
    return backend;
}
}  // namespace

std::shared_ptr<maf_sandbox::SandboxBackend> make_backend(const std::string& name) {
    if (name == kInProcess) {
        return std::make_shared<InProcessSandboxBackend>();
    }
    if (name == kLocal) {
        runtime::ensure_local_backend_can_start();  // doctor's explanation, not a later failure
        local::LocalBackendConfig config;
        config.egress_operator = runtime::EgressOperatorOptions::from_environment();
        return std::make_shared<local::LocalBackend>(std::move(config));
    }
    if (name == kAcas) {
        return make_acas_backend(BackendOptions{});
    }
    throw InvalidArgument(fmt::format("unknown backend '{}'; use one of: {}, {}, {}", name,
                                      kInProcess, kLocal, kAcas));
}

std::shared_ptr<maf_sandbox::SandboxBackend> make_backend(const std::string& name,
                                                          const BackendOptions& options) {
    if (name == kAcas) {
        return make_acas_backend(options);
    }
    return make_backend(name);
}

void add_backend_options(CLI::App& command, BackendOptions& options) {
    command.add_option("--endpoint", options.endpoint,
                       "ACAS data-plane endpoint, https://management.<region>.azuredevcompute.io "
                       "(ACAS_SANDBOX_ENDPOINT)");
    command.add_option("--subscription-id", options.subscription_id,
                       "Azure subscription of the sandbox group (ACAS_SANDBOX_SUBSCRIPTION_ID)");
    command.add_option("--resource-group", options.resource_group,
                       "Resource group of the sandbox group (ACAS_SANDBOX_RESOURCE_GROUP)");
    command.add_option("--sandbox-group", options.sandbox_group,
                       "ACAS sandbox group (ACAS_SANDBOX_GROUP)");
    command.add_option("--registry", options.registry,
                       "Registry that qualifies repo:tag images (ACAS_SANDBOX_REGISTRY)");
    command.add_option(
        "--ca-file", options.ca_file,
        "Extra CA certificate (PEM) to trust, e.g. the emulator's ca.pem (ACAS_SANDBOX_CA_FILE)");
    command.add_option(
        "--token", options.token,
        "Static bearer token for emulators and tests (ACAS_SANDBOX_TOKEN); default: the "
        "Azure default credential chain");
    command.add_flag(
        "--emulator", options.emulator,
        "The endpoint is an acas-emulator: declare the rung it names (implied for loopback)");
}

local::LocalBackendConfig local_backend_config(std::optional<std::uint64_t> memory_bytes,
                                               std::optional<std::uint64_t> pids,
                                               std::optional<std::uint64_t> disk_bytes) {
    runtime::ensure_local_backend_can_start();  // doctor's explanation, not a later failure
    local::LocalBackendConfig config;
    config.memory_bytes = memory_bytes.value_or(config.memory_bytes);
    config.pids = pids.value_or(config.pids);
    config.disk_bytes = disk_bytes.value_or(config.disk_bytes);
    config.egress_operator = runtime::EgressOperatorOptions::from_environment();
    return config;
}

std::string default_image_for(const maf_sandbox::SandboxBackend& backend) {
    if (backend.name() != kAcas)
        return {};
    return backend.isolation() == Isolation::microvm ? "ubuntu" : "host";
}

Task<void> check_image(SandboxBackend& backend, const std::string& image) {
    if (auto* local = dynamic_cast<local::LocalBackend*>(&backend)) {
        const auto wanted = runtime::parse_image_ref(image);
        std::vector<std::string> names;
        for (const auto& known : runtime::ImageStore(local->state_dir()).list()) {
            if (known.ref == wanted) {
                co_return;
            }
            names.push_back(known.ref.str());
        }
        throw InvalidArgument(fmt::format(
            "option '--image': '{}' is not in the local image store, which holds {}; import it "
            "with `maf-sandbox images import ARCHIVE --name {}`",
            image, fmt::join(names, ", "), wanted.str()));
    }
    auto* service = dynamic_cast<acas::AcasBackend*>(&backend);
    if (service == nullptr || image.find_first_of(":/@") != std::string::npos) {
        co_return;
    }
    const auto images = co_await service->list_images();
    if (std::find(images.prebuilt.begin(), images.prebuilt.end(), image) == images.prebuilt.end()) {
        throw InvalidArgument(fmt::format(
            "option '--image': '{}' is not in the service's prebuilt catalogue, which has {}; a "
            "private image needs its tag (repo:tag)",
            image,
            images.prebuilt.empty() ? std::string("nothing")
                                    : fmt::format("{}", fmt::join(images.prebuilt, ", "))));
    }
}

}  // namespace maf_sandbox::cli
