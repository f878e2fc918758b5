#include "backends.hpp"

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/in_process.hpp"
#include "maf_sandbox/local/local_backend.hpp"

namespace maf_sandbox::cli {

namespace {
// One line per backend; keep the refusal message below in step.
constexpr const char* kInProcess = "in-process";
constexpr const char* kLocal = "local";
}  // namespace

std::shared_ptr<maf_sandbox::SandboxBackend> make_backend(const std::string& name) {
    if (name == kInProcess) {
        return std::make_shared<InProcessSandboxBackend>();
    }
    if (name == kLocal) {
        return std::make_shared<local::LocalBackend>();
    }
    throw InvalidArgument(fmt::format("unknown backend '{}'; use one of: {}, {}", name, kInProcess, kLocal));
}

}  // namespace maf_sandbox::cli
