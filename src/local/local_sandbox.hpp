// One running local sandbox as the protocol's Sandbox: exec through the supervisor's socket,
// files natively through GuestFs on /proc/<supervisor>/root, each operation one pool job.
#pragma once

#include <boost/asio/thread_pool.hpp>
#include <memory>
#include <string>

#include "maf_sandbox/core/confined_sandbox.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/kernel/guest_fs.hpp"

namespace maf_sandbox::local {

class LocalSandbox final : public ConfinedSandbox {
  public:
    LocalSandbox(runtime::SandboxHandle handle, std::string base_directory, TransferLimits files_in,
                 std::uint64_t default_max_output, std::shared_ptr<boost::asio::thread_pool> pool);

    std::string base_directory() const override { return base_; }
    Task<ExecResult> exec(ExecRequest request) override;
    Task<ExecResult> exec_stream(ExecRequest request, ExecSink sink) override;
    Task<ExecResult> run_code(std::string code, Seconds timeout) override;
    Task<void> reclaim(std::string directory, std::string working_directory,
                       Seconds timeout) override;

    const runtime::SandboxHandle& handle() const noexcept { return handle_; }

  protected:
    Task<void> with_file_ops(FileWork work) override;

  private:
    runtime::SandboxHandle handle_;
    std::string base_;
    TransferLimits files_in_;
    std::uint64_t default_max_output_;
    std::shared_ptr<boost::asio::thread_pool> pool_;
};

}  // namespace maf_sandbox::local
