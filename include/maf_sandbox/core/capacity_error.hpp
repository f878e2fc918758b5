// The refusal of a sandbox the host has no room for. Part of the typed hierarchy of errors.hpp
// (RuntimeError family), declared in a header of its own so that only the code that raises or
// catches it depends on it.
#pragma once

#include <string_view>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox {

// Admitting the sandbox would overrun a host-wide budget: the share of kernel.pid_max sandboxes
// may use, the pool of host ids, or the share of fs.file-max its pids limit leaves. Refused
// before anything is made, never degraded.
class SandboxCapacityExceeded : public Error {
  public:
    using Error::Error;
    std::string_view type_name() const noexcept override { return "SandboxCapacityExceeded"; }
};

}  // namespace maf_sandbox
