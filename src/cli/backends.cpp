#include "backends.hpp"

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/in_process.hpp"

namespace maf_sandbox::cli {

namespace {
// One line per backend; keep the refusal message below in step.
constexpr const char* kInProcess = "in-process";
}  // namespace

std::shared_ptr<maf_sandbox::SandboxBackend> make_backend(const std::string& name) {
    if (name == kInProcess) {
        return std::make_shared<InProcessSandboxBackend>();
    }
    throw InvalidArgument(fmt::format("unknown backend '{}'; use one of: {}", name, kInProcess));
}

}  // namespace maf_sandbox::cli
