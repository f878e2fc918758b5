#include "maf_sandbox/kinds/shell.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>

#include "maf_sandbox/core/errors.hpp"
#include "sandboxed_call.hpp"

namespace maf_sandbox::kinds {

SandboxSpec shell_spec(const ShellConfig& config) {
    return SandboxSpec(kind_spec_fields(kShellKind, config.sandbox, {Capability::exec}));
}

struct ShellTool::Impl {
    detail::KindBinding binding;
    ShellConfig config;

    Task<void> run(detail::CallSite& site, ToolResult& result, std::string command,
                   ProgressReporter progress, OutputObserver output) {
        if (progress) {
            progress(1.0, 4.0, "creating the call directory");
        }
        // The call directory does not exist yet; a fixed argv makes it, from the filesystem root
        // so no working directory has to exist first.
        ToolResult setup;
        detail::CallSite root_site = site;
        root_site.call_path = "/";
        // Built outside the co_await: g++ 12 cannot carry an initializer_list across a suspension.
        Argv mkdir{"mkdir", "-p", "--", site.call_path};
        const bool made = co_await detail::run_program(binding, root_site, std::move(mkdir), setup);
        if (!made || setup.program->exit_code != 0) {
            binding.log->error("{}: creating {} failed: exit {}, stderr: {}", binding.tool_name,
                               site.call_path, setup.program ? setup.program->exit_code : -1,
                               setup.program ? setup.program->stderr_text : setup.message);
            result.failure = CallFailure::infrastructure;
            result.message =
                "The sandbox could not create the call's working directory, so the command did "
                "not run. Try again; if it keeps failing, ask the operator (the reason is in the "
                "server's log).";
            co_return;
        }
        if (progress) {
            progress(2.0, 4.0, "running the command");
        }
        co_await detail::run_program(binding, site, std::move(command), result, std::move(output));
    }
};

ShellTool::ShellTool(std::shared_ptr<SandboxRouter> router, ShellConfig config,
                     std::shared_ptr<spdlog::logger> log)
    : impl_(std::make_unique<Impl>(
          Impl{detail::KindBinding{std::move(router), shell_spec(config), config.sandbox.timeout,
                                   config.sandbox.max_output_bytes, config.sandbox.cleanup_timeout,
                                   std::move(log), kShellToolName},
               config})) {
    if (!impl_->binding.router) {
        throw InvalidArgument("run_shell needs a router; pass the host's SandboxRouter");
    }
    if (!impl_->binding.log) {
        throw InvalidArgument("run_shell needs a logger for the details it keeps from models");
    }
    impl_->binding.router->ensure_can_serve(impl_->binding.spec);
}

ShellTool::~ShellTool() = default;

const SandboxSpec& ShellTool::spec() const {
    return impl_->binding.spec;
}
ResultProvenance ShellTool::provenance() const {
    return detail::provenance_of(impl_->binding);
}
const ShellConfig& ShellTool::config() const {
    return impl_->config;
}

Task<ToolResult> ShellTool::run_shell(CallerContext caller, std::string command,
                                      ProgressReporter progress) {
    auto key = detail::key_for(caller);
    if (!key) {
        co_return detail::unbound_call_refusal(impl_->binding);
    }
    if (command.empty()) {
        co_return detail::failed(impl_->binding, CallFailure::refused,
                                 "The command is empty; pass a POSIX shell command line.");
    }
    auto* impl = impl_.get();
    detail::CallBody body = [impl, command = std::move(command), progress, output = caller.output](
                                detail::CallSite& site, ToolResult& result) {
        return impl->run(site, result, command, progress, output);
    };
    co_return co_await detail::run_in_call_directory(impl_->binding, std::move(*key),
                                                     std::move(body), progress, caller.allowance);
}

}  // namespace maf_sandbox::kinds
