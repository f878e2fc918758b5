#include "maf_sandbox/core/sandbox.hpp"

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox {

Task<ExecResult> Sandbox::exec_stream(ExecRequest, ExecSink) {
    throw NotImplemented(
        "this backend does not stream exec output (it does not declare streaming_exec); call "
        "exec, which answers when the command ends, or select a backend that declares it");
    co_return ExecResult{};
}

}  // namespace maf_sandbox
