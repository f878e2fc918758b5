// AcasSandbox: one ACAS sandbox as the protocol's Sandbox. Exec is bounded byte capture over the
// text-only exec; the file methods' prologue is the ConfinedSandbox base's, over AcasFileOps:
// writes run as the guest; stat/read/list are native; removal runs as the guest and is confirmed
// through the file plane.
#include <fmt/format.h>
#include <spdlog/logger.h>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/system/system_error.hpp>

#include "backend_state.hpp"
#include "exec_capture.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/core/file_transfer.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/shell_quote.hpp"
#include "maf_sandbox/net/http.hpp"
#include "wire.hpp"

namespace maf_sandbox::acas {

namespace asio = boost::asio;

namespace {

bool is_environment_name(const std::string& name) {
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0])))
        return false;
    for (char c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
            return false;
    }
    return true;
}

std::string command_line(const ExecRequest& request) {
    std::string line = std::visit(
        [](const auto& command) -> std::string {
            if constexpr (std::is_same_v<std::decay_t<decltype(command)>, Argv>) {
                return shell_join(command);
            } else {
                return command;
            }
        },
        request.command);
    // Only the request's own variables reach the guest: nothing of the host's environment.
    std::string prefix;
    for (const auto& [name, value] : request.environment) {
        if (!is_environment_name(name)) {
            throw InvalidArgument(fmt::format(
                "'{}' is not a valid environment variable name; use letters, digits and _", name));
        }
        prefix += fmt::format("export {}={}; ", name, shell_quote(value));
    }
    return prefix + line;
}

}  // namespace

AcasSandbox::AcasSandbox(std::shared_ptr<AcasBackend::State> state,
                         std::shared_ptr<HeldSandbox> held)
    : state_(std::move(state)), held_(std::move(held)) {}

std::string AcasSandbox::base_directory() const {
    return held_->base;
}

void AcasSandbox::require_usable() const {
    if (held_->invalidated) {
        throw SandboxInvalidated(
            "this sandbox was invalidated by an earlier failure and is being disposed; reacquire "
            "it");
    }
}

Task<ExecResult> AcasSandbox::run_code(std::string, Seconds) {
    throw NotImplemented(
        "the ACAS backend does not run code directly; run the interpreter with exec instead");
}

Task<void> AcasSandbox::reclaim(std::string, std::string, Seconds) {
    // Safe ancestry for a host-authority delete cannot be established, so nothing is called.
    throw NotImplemented(
        "ACAS withholds reclaim: dispose the sandbox instead (the router does this for you)");
}

Task<ExecResult> AcasSandbox::exec(ExecRequest request) {
    AcasBackend::State::Operation operation(state_);
    require_usable();
    const auto line = command_line(request);
    const auto working_directory =
        resolve_working_directory(request.working_directory, held_->base);
    const std::uint64_t limit =
        request.max_output_bytes.value_or(state_->config.exec_output_limit_bytes);
    const auto deadline = deadline_after(request.timeout);
    const auto token = capture::new_token();
    const bool had_stdin = !request.stdin_bytes.empty();
    if (had_stdin) {
        // stdin is delivered by staging it as a guest file; the capture reads it from there.
        const auto stdin_path = capture::stdin_file(token);
        co_await write_file_over_exec(*this, stdin_path, request.stdin_bytes, "/",
                                      std::chrono::duration<double>(deadline - SteadyClock::now()));
    }
    auto lease = co_await state_->lease(held_->binding);
    std::exception_ptr failure;
    bool sandbox_whole = false;
    bool program_ran = false;
    try {
        // One guest command: capture, and for output that fits one answer also its readback and
        // the scratch removal. The answer bound is a retrieval answer's, which inline output
        // (at most one chunk in all) stays inside.
        const auto command = capture::capture_command(token, line, limit, had_stdin);
        const auto answer = co_await lease->exec(held_->id, command, working_directory, deadline,
                                                 capture::kRetrievalAnswerBytes);
        program_ran = true;
        // The HTTP exchange runs to its answer even when the caller cancels meanwhile; a
        // cancelled exec still ends as one, so the sandbox is disposed like any other failure.
        if ((co_await asio::this_coro::cancellation_state).cancelled() !=
            asio::cancellation_type::none) {
            throw boost::system::system_error(asio::error::operation_aborted,
                                              "the exec was cancelled");
        }
        auto captured = answer.exit_code == 0 && answer.stderr_text.empty()
                            ? capture::parse_capture(token, answer.stdout_text)
                            : std::nullopt;
        if (!captured) {
            if (answer.exit_code == 127) {
                throw SandboxCapabilityNotSupported(
                    "the guest lacks a command bounded capture needs (sh mkdir mkfifo head cat wc "
                    "dd base64 rm rmdir); see docs/acas.md for the image prerequisites");
            }
            throw AcasExecCaptureFailed(fmt::format(
                "the guest's capture answer was malformed or its scratch directory was replaced "
                "(exit {}); the sandbox is disposed",
                answer.exit_code));
        }
        const auto& manifest = captured->manifest;
        std::string streams[2];
        const std::uint64_t sizes[2] = {manifest.stdout_size, manifest.stderr_size};
        int cleanup_exit = 0;
        if (captured->output) {
            streams[0] = std::move(captured->output->stdout_bytes);
            streams[1] = std::move(captured->output->stderr_bytes);
            cleanup_exit = captured->output->cleanup_exit;
        } else {
            const char* names[2] = {"stdout", "stderr"};
            for (int s = 0; s < 2; ++s) {
                const auto wanted = std::min<std::uint64_t>(sizes[s], limit);
                for (std::uint64_t chunk = 0; streams[s].size() < wanted; ++chunk) {
                    const auto piece = co_await lease->exec(
                        held_->id, capture::retrieval_command(token, names[s], chunk),
                        std::string("/"), deadline, capture::kRetrievalAnswerBytes);
                    const auto bytes = piece.exit_code == 0 && piece.stderr_text.empty()
                                           ? capture::parse_retrieval(token, piece.stdout_text)
                                           : std::nullopt;
                    const auto expected =
                        std::min<std::uint64_t>(capture::kChunkBytes, sizes[s] - streams[s].size());
                    if (!bytes || bytes->size() != expected) {
                        throw AcasExecCaptureFailed(
                            "retrieving captured output from the guest failed; the sandbox is "
                            "disposed");
                    }
                    streams[s] += *bytes;
                }
            }
            const auto cleanup =
                co_await lease->exec(held_->id, capture::cleanup_command(token, had_stdin),
                                     std::string("/"), deadline, 64 * 1024);
            cleanup_exit = cleanup.exit_code;
        }
        for (auto& stream : streams)
            stream.resize(std::min<std::uint64_t>(stream.size(), limit));
        if (cleanup_exit != 0) {
            // The bytes are complete: keep them and say where the scratch remains.
            state_->log->warn(
                "could not remove the exec scratch directory {} in sandbox {} (exit {}); it "
                "remains until the sandbox is disposed",
                capture::scratch_dir(token), held_->id, cleanup_exit);
        }
        if (sizes[0] > limit || sizes[1] > limit) {
            sandbox_whole = true;
            throw ExecOutputLimitExceeded(
                fmt::format("the command's output exceeded the {}-byte per-stream limit", limit),
                streams[0], streams[1], static_cast<std::size_t>(sizes[0] + sizes[1]),
                manifest.exit_code);
        }
        co_return ExecResult{std::move(streams[0]), std::move(streams[1]), manifest.exit_code};
    } catch (const AcasThrottled&) {
        // Only a Retry-After wait was pending before the program was sent: nothing ran, the
        // sandbox is whole. Once it ran, a throttled readback leaves its scratch behind: that is
        // a failure like any other.
        if (!program_ran)
            throw;
        failure = std::current_exception();
    } catch (const ExecOutputLimitExceeded&) {
        if (sandbox_whole)
            throw;
        failure = std::current_exception();
    } catch (...) {
        failure = std::current_exception();
    }
    // A cancelled exec disposes the sandbox too; until this reset, every later co_await of an
    // awaitable (invalidate included) would throw operation_aborted before doing anything.
    co_await asio::this_coro::reset_cancellation_state();
    // Whatever was in flight when the caller's timeout expired, that is exactly a Timeout: report
    // it on time and dispose the sandbox in the background.
    if (SteadyClock::now() >= deadline) {
        state_->invalidate_in_background(held_, "an exec timed out",
                                         co_await asio::this_coro::executor);
        throw Timeout(
            fmt::format("the command did not finish within {:.1f} s; the sandbox is being disposed",
                        request.timeout.count()));
    }
    co_await state_->invalidate(held_, "an exec failed in flight, so whether it ran is unknown");
    std::rethrow_exception(failure);
}

Task<std::optional<SandboxEntry>> AcasSandbox::raw_stat(std::string absolute_path,
                                                        Deadline deadline) {
    auto lease = co_await state_->lease(held_->binding);
    auto raw = co_await lease->stat_raw(held_->id, absolute_path, deadline);
    if (!raw)
        co_return std::nullopt;
    const auto entry = wire::parse_entry(*raw);
    co_return SandboxEntry{absolute_path, entry.kind, entry.size};
}

// The file plane's stat, list and read; writes and removals run as the guest through exec, so no
// probe or guest output can select the host file plane for them. One deadline bounds the whole
// operation.
class AcasFileOps final : public GuestFileOps {
  public:
    AcasFileOps(AcasSandbox& sandbox, AcasBackend::State& state, const HeldSandbox& held,
                Deadline deadline)
        : sandbox_(sandbox), state_(state), held_(held), deadline_(deadline) {}

    Task<std::optional<SandboxEntry>> stat(std::string absolute_path) override {
        return sandbox_.raw_stat(std::move(absolute_path), deadline_);
    }

    Task<void> write(std::string absolute_path, std::string content) override {
        co_await write_file_over_exec(sandbox_, absolute_path, std::move(content), "/",
                                      remaining());
    }

    Task<std::string> read(std::string absolute_path, std::uint64_t max_bytes) override {
        auto lease = co_await state_.lease(held_.binding);
        std::optional<std::string> bytes;
        try {
            // The read follows links, so it runs only after the stat classified a regular file; a
            // FIFO looks like an empty file and never answers, which the deadline turns into
            // Timeout.
            bytes = co_await lease->read_file(held_.id, absolute_path, max_bytes, deadline_);
        } catch (const Timeout&) {
            throw Timeout(
                fmt::format("reading {} did not finish within read_timeout_seconds (a "
                            "FIFO never answers); refused",
                            absolute_path));
        }
        if (!bytes)
            throw FileNotFound(fmt::format("{} disappeared before it was read", absolute_path),
                               ENOENT);
        co_return std::move(*bytes);
    }

    Task<std::vector<SandboxEntry>> list(std::string absolute_path) override {
        auto lease = co_await state_.lease(held_.binding);
        const auto listing = co_await lease->list_raw(held_.id, absolute_path, deadline_);
        if (!listing)
            throw FileNotFound(fmt::format("{} does not exist in the sandbox", absolute_path),
                               ENOENT);
        const auto* entries = listing->if_contains("entries");
        if (entries == nullptr || !entries->is_array()) {
            throw AcasEntryPayloadIncomplete(
                "the ACAS listing has no entries array; refusing to read it as empty");
        }
        std::vector<SandboxEntry> out;
        for (const auto& item : entries->as_array()) {
            auto entry = wire::parse_entry(item);
            if (entry.path.empty()) {
                throw AcasEntryPayloadIncomplete("an ACAS listing entry has no path");
            }
            // The service's answer is not trusted to stay inside the directory asked about.
            auto normal = normpath(entry.path);
            if (guest_dirname(normal) != absolute_path || normal == absolute_path) {
                throw ConfinementEscape(fmt::format(
                    "the listing of {} named an entry that is not its direct child; refused",
                    absolute_path));
            }
            out.push_back(SandboxEntry{std::move(normal), entry.kind, entry.size});
        }
        co_return out;
    }

    Task<void> remove(std::string absolute_path, const SandboxEntry&, bool recursive) override {
        ExecRequest request;
        request.command = Argv{"rm", recursive ? "-rf" : "-f", "--", absolute_path};
        request.environment["LC_ALL"] = "C";  // libc's messages, which the refusal is read from
        request.working_directory = "/";
        request.timeout = remaining();
        request.max_output_bytes = 4096;
        const auto result = co_await sandbox_.exec(std::move(request));
        if (result.exit_code != 0) {
            const auto message = fmt::format("removing {} failed in the guest (exit {}): {}",
                                             absolute_path, result.exit_code, result.stderr_text());
            if (result.stderr_text().find("Permission denied") != std::string::npos ||
                result.stderr_text().find("Operation not permitted") != std::string::npos) {
                throw SandboxFilePermissionRefused(message);
            }
            throw FileError(message);
        }
        const auto remaining_entry = co_await sandbox_.raw_stat(absolute_path, deadline_);
        if (remaining_entry) {
            throw FileError(
                fmt::format("{} is still present after the guest removed it", absolute_path));
        }
    }

  private:
    Seconds remaining() const {
        return std::chrono::duration<double>(deadline_ - SteadyClock::now());
    }

    AcasSandbox& sandbox_;
    AcasBackend::State& state_;
    const HeldSandbox& held_;
    Deadline deadline_;
};

Task<void> AcasSandbox::with_file_ops(FileWork work) {
    AcasBackend::State::Operation operation(state_);
    require_usable();
    AcasFileOps ops(*this, *state_, *held_, deadline_after(state_->config.read_timeout));
    co_await work(ops);
}

}  // namespace maf_sandbox::acas
