// What a terminal exec (`run -t`, `exec -t`) needs of a local sandbox that the protocol's Sandbox
// does not carry: its supervisor's socket, for the wire's interactive exec
// (maf_sandbox/runtime/wire/exec_interactive.hpp).
#pragma once

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"

namespace maf_sandbox::local {

// The handle of a sandbox LocalBackend made; nullptr for any other backend's sandbox.
const runtime::SandboxHandle* terminal_handle_of(const Sandbox& sandbox) noexcept;

}  // namespace maf_sandbox::local
