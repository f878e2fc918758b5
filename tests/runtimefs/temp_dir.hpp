// The runtimefs tests' name for the shared temporary directory (tests/support/test_dirs.hpp).
#pragma once

#include "test_dirs.hpp"

namespace maf_sandbox::runtime::testing {

using ::maf_sandbox::testing::TempDir;

}  // namespace maf_sandbox::runtime::testing
