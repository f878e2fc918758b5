// The supervisor program: its host-side half (supervisor.cpp), which clones the sandbox's PID 1
// (pid1.cpp).
#pragma once

#include "maf_sandbox/runtime/wire/supervisor_config.hpp"

namespace maf_sandbox::runtime {

// The whole program: returns its exit status.
int supervisor_main(int argc, char** argv);

}  // namespace maf_sandbox::runtime
