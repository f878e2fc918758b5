#include "maf_sandbox/core/file_transfer.hpp"

#include <openssl/evp.h>

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>
#include <chrono>
#include <exception>
#include <optional>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/core/shell_quote.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox {

namespace {

using Clock = std::chrono::steady_clock;

constexpr Seconds kTakeBackBudget{10.0};
constexpr const char* kLocale = "export LC_ALL=C; ";
// Guest refusals the scripts themselves print end in the same C-locale suffixes libc uses.
constexpr const char* kIsADirectoryLine = "maf-sandbox: the target: Is a directory";
constexpr std::size_t kEchoedStderrChars = 200;

// Thrown inside this file only: the deadline passed before the next command could start.
struct DeadlineBetweenCommands {};
// Thrown inside this file only: the deadline passed before the command was sent (a
// SandboxQueuedTimeout, such as a 429 Retry-After that outlasts it), so it never ran and the
// guest is as the previous command left it. Carries that timeout, to be reported once the staged
// file is taken back.
struct NeverSent {
    std::exception_ptr timeout;
};

void refuse_invalid_path(const std::string& path) {
    if (path.find_first_of(std::string_view("\0\r\n", 3)) != std::string::npos) {
        throw SandboxFileRefused(
            FileRefusal::invalid_path,
            "the path contains a NUL, CR or LF character, which the shell transfer cannot carry; "
            "rename the file");
    }
    const auto slash = path.rfind('/');
    const auto leaf = slash == std::string::npos ? std::string_view(path)
                                                 : std::string_view(path).substr(slash + 1);
    if (leaf.empty() || leaf == "." || leaf == "..") {
        throw SandboxFileRefused(
            FileRefusal::invalid_path,
            fmt::format("'{}' does not name a file (its last component is '{}'); name a file",
                        replace_invalid_utf8(path), leaf));
    }
}

std::string last_line(std::string_view text) {
    const auto end = text.find_last_not_of(" \t\r\n");
    if (end == std::string_view::npos) {
        return {};
    }
    text = text.substr(0, end + 1);
    const auto newline = text.rfind('\n');
    auto line = newline == std::string_view::npos ? text : text.substr(newline + 1);
    return replace_invalid_utf8(line.substr(0, kEchoedStderrChars));
}

bool ends_with(std::string_view text, std::string_view suffix) {
    return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// The guest's refusal, typed by the libc message at the end of its last stderr line.
[[noreturn]] void throw_guest_refusal(const std::string& path, const ExecResult& result) {
    const auto line = last_line(result.stderr_bytes);
    struct Suffix {
        std::string_view text;
        FileRefusal refusal;
    };
    static constexpr std::array<Suffix, 6> kSuffixes{{
        {"Permission denied", FileRefusal::permission_denied},
        {"Is a directory", FileRefusal::is_directory},
        {"Not a directory", FileRefusal::not_found},
        {"File exists", FileRefusal::invalid_path},
        {"No such file or directory", FileRefusal::not_found},
        {"Not a regular file", FileRefusal::invalid_path},
    }};
    for (const auto& suffix : kSuffixes) {
        if (ends_with(line, suffix.text)) {
            throw_file_refused(
                suffix.refusal,
                fmt::format("the guest refused '{}': {}; fix the path or its permissions",
                            replace_invalid_utf8(path), suffix.text));
        }
    }
    throw SandboxShellTransferFailed(fmt::format(
        "the shell transfer of '{}' failed in the guest (exit code {}: {}); check that the guest "
        "has sh, mkdir, mv, rm, base64 and wc",
        replace_invalid_utf8(path), result.exit_code, line.empty() ? "no message" : line));
}

bool is_cancellation(const boost::system::system_error& error) {
    return error.code() == boost::asio::error::operation_aborted;
}

// One guest command under the transfer's single deadline. Anything that stops the command
// mid-way becomes SandboxShellTransferUnfinished: the guest's state is then unknown.
Task<ExecResult> run_command(Sandbox& sandbox, std::string command, std::string working_directory,
                             Clock::time_point deadline, std::uint64_t output_budget,
                             const std::string& path, bool overflow_means_grown = false) {
    const auto remaining = std::chrono::duration_cast<Seconds>(deadline - Clock::now());
    if (remaining <= Seconds{0}) {
        throw DeadlineBetweenCommands{};
    }
    ExecRequest request;
    request.command = kLocale + command;
    request.working_directory = std::move(working_directory);
    request.timeout = remaining;
    request.max_output_bytes = output_budget;
    std::string failure;
    try {
        co_return co_await sandbox.exec(std::move(request));
    } catch (const SandboxQueuedTimeout&) {
        throw NeverSent{std::current_exception()};
    } catch (const Timeout&) {
        failure = "the transfer's deadline expired during a guest command";
    } catch (const ExecOutputLimitExceeded&) {
        if (overflow_means_grown) {
            throw SandboxTransferCapExceeded(
                fmt::format("'{}' grew over its cap while it was read; it was not read",
                            replace_invalid_utf8(path)));
        }
        failure = "a guest command wrote more output than a transfer command may";
    } catch (const Error& error) {
        failure = fmt::format("a guest command failed in transport ({})", error.type_name());
    } catch (const boost::system::system_error& error) {
        if (is_cancellation(error)) {
            throw;
        }
        failure = "a guest command failed in transport";
    }
    throw SandboxShellTransferUnfinished(fmt::format(
        "the shell transfer of '{}' stopped mid-way: {}; the sandbox may hold a partial file, "
        "discard it and retry with a longer timeout",
        replace_invalid_utf8(path), failure));
}

// Removes the staged file under its own budget; failing to is an unfinished transfer.
Task<void> take_back(Sandbox& sandbox, const std::string& staged,
                     const std::string& working_directory, const std::string& path) {
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(kTakeBackBudget);
    std::optional<ExecResult> result;
    try {
        result = co_await run_command(sandbox, "rm -f -- " + shell_quote(staged), working_directory,
                                      deadline, kShellCommandOutputBytes, path);
    } catch (const SandboxShellTransferUnfinished&) {
    } catch (const DeadlineBetweenCommands&) {
    } catch (const NeverSent&) {
    }
    if (!result || result->exit_code != 0) {
        throw SandboxShellTransferUnfinished(fmt::format(
            "the shell transfer of '{}' failed and its staged file could not be removed; the "
            "sandbox may hold a partial file, discard it",
            replace_invalid_utf8(path)));
    }
}

std::string parent_of(const std::string& path) {
    auto parent = guest_dirname(path);
    return parent.empty() ? std::string(".") : parent;
}

std::string sibling(const std::string& parent, const std::string& name) {
    return parent.back() == '/' ? parent + name : parent + "/" + name;
}

std::uint64_t encoded_length(std::uint64_t bytes) {
    return 4 * ((bytes + 2) / 3);
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
    std::string text(encoded_length(bytes.size()) + 1, '\0');
    const auto written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(text.data()),
                                         reinterpret_cast<const unsigned char*>(bytes.data()),
                                         static_cast<int>(bytes.size()));
    text.resize(static_cast<std::size_t>(written));
    return text;
}

std::string base64_decode(std::string_view text) {
    std::string compact;
    compact.reserve(text.size());
    for (char c : text) {
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
            continue;
        }
        const bool valid = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                           (c >= '0' && c <= '9') || c == '+' || c == '/' || c == '=';
        if (!valid) {
            throw InvalidArgument(
                "the guest's base64 answer holds a character outside base64; "
                "check the guest's base64 utility");
        }
        compact.push_back(c);
    }
    if (compact.size() % 4 != 0) {
        throw InvalidArgument(
            "the guest's base64 answer has a length that is not a multiple of "
            "4; check the guest's base64 utility");
    }
    std::string bytes(compact.size() / 4 * 3 + 1, '\0');
    const auto written = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(bytes.data()),
                                         reinterpret_cast<const unsigned char*>(compact.data()),
                                         static_cast<int>(compact.size()));
    if (written < 0) {
        throw InvalidArgument(
            "the guest's base64 answer is malformed; check the guest's base64 "
            "utility");
    }
    std::size_t padding = 0;
    for (auto it = compact.rbegin(); it != compact.rend() && *it == '=' && padding < 2; ++it) {
        ++padding;
    }
    bytes.resize(static_cast<std::size_t>(written) - padding);
    return bytes;
}

Task<void> write_file_over_exec(Sandbox& sandbox, std::string path, std::string content,
                                std::string working_directory, Seconds timeout,
                                std::size_t chunk_bytes) {
    refuse_invalid_path(path);
    if (chunk_bytes < 3) {
        throw InvalidArgument("the shell transfer's chunk size must be at least 3 bytes");
    }
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
    const auto target = shell_quote(path);
    const auto parent = parent_of(path);
    const auto staged_path = sibling(parent, ".maf-" + random_hex(16) + ".part");
    const auto staged = shell_quote(staged_path);
    const auto refuse_directory = fmt::format("if [ -d {} ]; then echo {} >&2; exit 1; fi; ",
                                              target, shell_quote(kIsADirectoryLine));
    // Whole multiples of 3 content bytes per chunk, so each chunk's base64 decodes on its own.
    const auto slice = chunk_bytes / 3 * 3;

    std::vector<std::string> commands;
    commands.push_back(fmt::format("mkdir -p -- {} || exit 1; {}: > {}", shell_quote(parent),
                                   refuse_directory, staged));
    for (std::size_t offset = 0; offset < content.size(); offset += slice) {
        const auto chunk = std::string_view(content).substr(offset, slice);
        commands.push_back(
            fmt::format("printf %s {} | base64 -d >> {}", base64_encode(chunk), staged));
    }
    commands.push_back(fmt::format("{}mv -f -- {} {}", refuse_directory, staged, target));

    bool staged_may_exist = false;
    for (auto& command : commands) {
        std::optional<ExecResult> result;
        std::exception_ptr never_sent;
        try {
            result = co_await run_command(sandbox, std::move(command), working_directory, deadline,
                                          kShellCommandOutputBytes, path);
        } catch (const DeadlineBetweenCommands&) {
            // Handled below, outside the catch block, because take_back awaits.
        } catch (const NeverSent& unsent) {
            never_sent = unsent.timeout;
        }
        if (!result) {
            if (staged_may_exist) {
                co_await take_back(sandbox, staged_path, working_directory, path);
            }
            if (never_sent) {
                // The deadline passed while the command waited to be sent: the staged file is
                // gone and nothing else changed, so this is the caller's timeout, sandbox whole.
                std::rethrow_exception(never_sent);
            }
            throw SandboxShellTransferFailed(fmt::format(
                "the shell transfer of '{}' ran out of time between guest commands and was "
                "undone; retry with a longer timeout",
                replace_invalid_utf8(path)));
        }
        staged_may_exist = true;
        if (result->exit_code != 0) {
            co_await take_back(sandbox, staged_path, working_directory, path);
            throw_guest_refusal(path, *result);
        }
    }
}

Task<std::string> read_file_over_exec(Sandbox& sandbox, std::string path,
                                      std::string working_directory, std::uint64_t max_bytes,
                                      Seconds timeout) {
    refuse_invalid_path(path);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
    const auto target = shell_quote(path);
    const auto regular_check = fmt::format(
        "if [ -L {0} ] || [ ! -f {0} ]; then echo 'maf-sandbox: Not a regular file' >&2; exit 1; "
        "fi; ",
        target);
    const auto probe = fmt::format(
        "if [ ! -e {0} ] && [ ! -L {0} ]; then echo 'maf-sandbox: No such file or directory' >&2; "
        "exit 1; fi; if [ ! -L {0} ] && [ -d {0} ]; then echo 'maf-sandbox: Is a directory' >&2; "
        "exit 1; fi; {1}if [ ! -r {0} ]; then echo 'maf-sandbox: Permission denied' >&2; exit 1; "
        "fi; wc -c < {0}",
        target, regular_check);

    std::optional<ExecResult> probed;
    try {
        probed = co_await run_command(sandbox, probe, working_directory, deadline,
                                      kShellCommandOutputBytes, path);
    } catch (const DeadlineBetweenCommands&) {
    } catch (const NeverSent& unsent) {
        std::rethrow_exception(unsent.timeout);  // a read changes nothing: the timeout as it is
    }
    if (!probed) {
        throw SandboxShellTransferFailed(fmt::format(
            "the shell read of '{}' had no time left to start; retry with a longer timeout",
            replace_invalid_utf8(path)));
    }
    if (probed->exit_code != 0) {
        throw_guest_refusal(path, *probed);
    }
    const auto size_text = last_line(probed->stdout_bytes);
    std::uint64_t size = 0;
    if (size_text.empty() || size_text.size() > 19 ||
        !std::all_of(size_text.begin(), size_text.end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
        throw SandboxShellTransferFailed(fmt::format(
            "the guest answered the size of '{}' with '{}', not a number; check the guest's wc",
            replace_invalid_utf8(path), size_text));
    }
    size = std::stoull(size_text);
    if (size > max_bytes) {
        throw SandboxTransferCapExceeded(
            fmt::format("'{}' holds {} bytes, over the cap of {} bytes; it was not read",
                        replace_invalid_utf8(path), size, max_bytes));
    }

    // base64 wraps its output at 76 columns: budget for the line breaks of a file at the cap.
    const auto encoded = encoded_length(max_bytes);
    const auto budget =
        std::max<std::uint64_t>(kShellCommandOutputBytes, encoded + encoded / 76 + 64);
    std::optional<ExecResult> read;
    try {
        read = co_await run_command(sandbox, regular_check + "base64 < " + target,
                                    working_directory, deadline, budget, path, true);
    } catch (const DeadlineBetweenCommands&) {
    } catch (const NeverSent& unsent) {
        std::rethrow_exception(unsent.timeout);
    }
    if (!read) {
        throw SandboxShellTransferFailed(fmt::format(
            "the shell read of '{}' ran out of time between guest commands; retry with a longer "
            "timeout",
            replace_invalid_utf8(path)));
    }
    if (read->exit_code != 0) {
        throw_guest_refusal(path, *read);
    }
    std::string content;
    try {
        content = base64_decode(read->stdout_bytes);
    } catch (const InvalidArgument& error) {
        throw SandboxShellTransferFailed(fmt::format("the shell read of '{}' failed: {}",
                                                     replace_invalid_utf8(path), error.what()));
    }
    if (content.size() > max_bytes) {
        throw SandboxTransferCapExceeded(
            fmt::format("'{}' grew over the cap of {} bytes while it was read; it was not read",
                        replace_invalid_utf8(path), max_bytes));
    }
    co_return content;
}

}  // namespace maf_sandbox
