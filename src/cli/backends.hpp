// The backends the CLI can build by name. Every command that acquires a sandbox builds its backend
// here and then goes through a SandboxRouter, never around it.
#pragma once

#include <memory>
#include <string>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::cli {

// A fresh backend for `name`. Throws InvalidArgument naming the known backends for any other name.
std::shared_ptr<maf_sandbox::SandboxBackend> make_backend(const std::string& name);

}  // namespace maf_sandbox::cli
