#include "maf_sandbox/kinds/conversation_files.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>

#include <boost/asio/this_coro.hpp>
#include <functional>
#include <optional>

#include "maf_sandbox/core/error_detail.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "sandboxed_call.hpp"

namespace maf_sandbox::kinds {
namespace {

constexpr const char* kNotKept =
    "This server gives every call a fresh sandbox, so an uploaded file would be gone before any "
    "call could read it; pass the content to the program instead.";

FileToolResult as_file_result(ToolResult result) {
    FileToolResult file;
    file.provenance = result.provenance;
    file.failure = result.failure;
    file.message = std::move(result.message);
    return file;
}

// A sentence the model can act on for a file operation the sandbox refused; nullopt for a
// failure of the host or the backend (logged, answered with a fixed sentence).
std::optional<std::string> refusal_sentence(const std::exception_ptr& error,
                                            const std::string& path, bool reading) {
    try {
        std::rethrow_exception(error);
    } catch (const SandboxTransferCapExceeded&) {
        return fmt::format("'{}' is over the per-file transfer cap, so it was not {}.", path,
                           reading ? "read" : "written");
    } catch (const FileNotFound&) {
        return fmt::format("'{}' does not exist in the sandbox's work directory.", path);
    } catch (const IsADirectory&) {
        return fmt::format("'{}' is a directory; name a regular file.", path);
    } catch (const NotADirectory&) {
        return fmt::format("A parent of '{}' is not a directory.", path);
    } catch (const InvalidArgument&) {
        // ConfinementEscape included: a link on the way out of the work directory.
        return fmt::format(
            "'{}' leaves the sandbox's work directory through a link; use a plain "
            "path.",
            path);
    } catch (const FileError&) {
        return fmt::format("'{}' is not a regular file (a link or a device), so it was not {}.",
                           path, reading ? "read" : "written");
    } catch (...) {
        return std::nullopt;
    }
}

}  // namespace

struct ConversationFiles::Impl {
    detail::KindBinding binding;

    bool call_scoped() const {
        return stronger(binding.router->min_isolation_scope(), binding.spec->isolation_scope) ==
               IsolationScope::call;
    }

    using Operation =
        std::function<Task<void>(Sandbox&, const std::string& work_dir, FileToolResult& result)>;

    // Acquires the conversation's sandbox and runs `operation` in its work directory, turning
    // failures into fixed sentences (the details go to the log).
    Task<FileToolResult> run(const CallerContext& caller, const std::string& path, bool reading,
                             Operation operation) {
        auto key = detail::key_for(caller);
        if (!key) {
            co_return as_file_result(detail::unbound_call_refusal(binding));
        }
        if (call_scoped()) {
            co_return as_file_result(detail::failed(binding, CallFailure::refused, kNotKept));
        }
        try {
            validate_artifact_name(path);
        } catch (const SandboxArtifactNameInvalid&) {
            co_return as_file_result(detail::failed(
                binding, CallFailure::refused,
                fmt::format("'{}' is not a usable path: give one relative to the sandbox's work "
                            "directory, without '..', empty segments or control characters.",
                            detail::bounded_echo(path))));
        }
        std::optional<SandboxAllowance::Claim> claim;
        if (caller.allowance) {
            claim = caller.allowance->claim(sandbox_slot(*key, binding.spec->kind));
            if (!claim) {
                co_return as_file_result(
                    detail::over_allowance_refusal(binding, caller.allowance->cap()));
            }
        }
        FileToolResult result;
        result.provenance = detail::provenance_of(binding);
        std::shared_ptr<Sandbox> sandbox;
        std::exception_ptr error;
        try {
            sandbox = co_await binding.router->acquire(*key, binding.spec);
        } catch (...) {
            error = std::current_exception();
        }
        if (error) {
            if ((co_await boost::asio::this_coro::cancellation_state).cancelled() !=
                boost::asio::cancellation_type::none) {
                std::rethrow_exception(error);
            }
            binding.log->error("{}: acquiring a sandbox failed: {}", binding.tool_name,
                               error_detail(error));
            co_return as_file_result(detail::failed(binding, CallFailure::infrastructure,
                                                    detail::acquire_sentence(error)));
        }
        if (claim) {
            claim->settle();
        }
        const auto work_dir =
            normpath(binding.spec->work_dir ? *binding.spec->work_dir : sandbox->base_directory());
        result.guest_path = join_guest_path(work_dir, path);
        try {
            co_await operation(*sandbox, work_dir, result);
            co_return result;
        } catch (...) {
            error = std::current_exception();
        }
        if ((co_await boost::asio::this_coro::cancellation_state).cancelled() !=
            boost::asio::cancellation_type::none) {
            std::rethrow_exception(error);
        }
        binding.log->warn("{}: {} failed: {}", binding.tool_name, detail::bounded_echo(path),
                          error_detail(error));
        result.content.clear();
        if (auto sentence = refusal_sentence(error, detail::bounded_echo(path), reading)) {
            result.failure = CallFailure::refused;
            result.message = std::move(*sentence);
        } else {
            result.failure = CallFailure::infrastructure;
            result.message =
                "The sandbox failed while moving the file. Try again; if it keeps failing, ask "
                "the operator (the reason is in the server's log).";
        }
        co_return result;
    }
};

ConversationFiles::ConversationFiles(std::shared_ptr<SandboxRouter> router, SandboxSpec spec,
                                     std::shared_ptr<spdlog::logger> log)
    : impl_(std::make_unique<Impl>(
          Impl{detail::KindBinding{std::move(router), std::move(spec), Seconds{0}, 0, Seconds{0},
                                   std::move(log), "file transfer"}})) {
    if (!impl_->binding.router) {
        throw InvalidArgument("file transfer needs a router; pass the host's SandboxRouter");
    }
    if (!impl_->binding.log) {
        throw InvalidArgument("file transfer needs a logger for the details it keeps from models");
    }
}

ConversationFiles::~ConversationFiles() = default;

const SandboxSpec& ConversationFiles::spec() const {
    return impl_->binding.spec;
}
ResultProvenance ConversationFiles::provenance() const {
    return detail::provenance_of(impl_->binding);
}
bool ConversationFiles::keeps_files() const {
    return !impl_->call_scoped();
}

Task<FileToolResult> ConversationFiles::upload(CallerContext caller, std::string path,
                                               std::string content) {
    const auto cap = impl_->binding.spec->files_in.max_bytes_per_file;
    if (content.size() > cap) {
        co_return as_file_result(detail::failed(
            impl_->binding, CallFailure::refused,
            fmt::format("The file is {} bytes, over the {}-byte per-file cap for files sent to "
                        "the sandbox; it was not written.",
                        content.size(), cap)));
    }
    const auto size = content.size();
    Impl::Operation operation = [path, content = std::move(content), size](
                                    Sandbox& sandbox, const std::string& work_dir,
                                    FileToolResult& result) -> Task<void> {
        co_await sandbox.write_file(path, content, work_dir);
        result.size = size;
        result.message = fmt::format("Wrote {} bytes to {}.", size, result.guest_path);
    };
    co_return co_await impl_->run(caller, path, false, std::move(operation));
}

Task<FileToolResult> ConversationFiles::download(CallerContext caller, std::string path) {
    const auto cap = impl_->binding.spec->files_out.max_bytes_per_file;
    Impl::Operation operation = [path, cap](Sandbox& sandbox, const std::string& work_dir,
                                            FileToolResult& result) -> Task<void> {
        result.content = co_await sandbox.read_file(path, work_dir, cap);
        result.size = result.content.size();
        result.message = fmt::format("Read {} bytes from {}.", result.size, result.guest_path);
    };
    co_return co_await impl_->run(caller, path, true, std::move(operation));
}

}  // namespace maf_sandbox::kinds
