// One concern, the host side of host tools over exec: upload, launch, supervise under one deadline,
// serve requests in id order, stop the program on expiry, and always remove the transport
// directory.
#include "maf_sandbox/core/host_tools_over_exec.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <boost/asio/error.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <exception>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/shell_quote.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox {

namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace boost::asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

constexpr auto kGrace = std::chrono::seconds(2);
constexpr auto kRemovalBudget = std::chrono::seconds(10);
constexpr std::uint64_t kSmallFileCap = 32;
constexpr std::size_t kTimeoutOutputChars = 2000;
constexpr std::size_t kValueFramingBytes = 11;  // {"value": } around the value
constexpr std::size_t kEchoedGuestChars = 120;

// The run's own deadline expired inside a transport call (a backend's Timeout is different).
struct OwnDeadline {};

Seconds until(Clock::time_point when) {
    return std::chrono::duration_cast<Seconds>(when - Clock::now());
}

// Runs `operation` until `when`; throws OwnDeadline when the deadline wins.
template <typename T>
Task<T> before(Task<T> operation, Clock::time_point when) {
    asio::steady_timer timer(co_await asio::this_coro::executor, when);
    auto outcome = co_await (std::move(operation) || timer.async_wait(asio::use_awaitable));
    if (outcome.index() == 1) {
        throw OwnDeadline{};
    }
    co_return std::move(std::get<0>(outcome));
}

Task<void> before(Task<void> operation, Clock::time_point when) {
    asio::steady_timer timer(co_await asio::this_coro::executor, when);
    auto outcome = co_await (std::move(operation) || timer.async_wait(asio::use_awaitable));
    if (outcome.index() == 1) {
        throw OwnDeadline{};
    }
}

Task<void> sleep_for(Seconds duration) {
    asio::steady_timer timer(co_await asio::this_coro::executor,
                             std::chrono::duration_cast<Clock::duration>(duration));
    co_await timer.async_wait(asio::use_awaitable);
}

enum class FileState { absent, too_large, present };

struct SmallFile {
    FileState state = FileState::absent;
    std::string content;
};

// Stat then read: absent, not a file or still empty reads as "not yet"; over the cap (or of
// unknown size) as too large. A file that vanished between the calls is "not yet".
Task<SmallFile> read_capped(Sandbox& sandbox, const GuestRunLayout& layout, const std::string& path,
                            std::uint64_t cap, Clock::time_point when) {
    const auto entry = co_await before(sandbox.stat_file(path, layout.directory), when);
    if (!entry || entry->kind != EntryKind::file || entry->size_bytes == std::uint64_t{0}) {
        co_return SmallFile{};
    }
    if (!entry->size_bytes || *entry->size_bytes > cap) {
        co_return SmallFile{FileState::too_large, {}};
    }
    try {
        auto content = co_await before(sandbox.read_file(path, layout.directory, cap), when);
        co_return SmallFile{FileState::present, std::move(content)};
    } catch (const SandboxTransferCapExceeded&) {
        co_return SmallFile{FileState::too_large, {}};
    } catch (const FileNotFound&) {
        co_return SmallFile{};
    }
}

std::optional<std::uint64_t> positive_number(const std::string& text) {
    const auto first = text.find_first_not_of(" \t\r\n");
    const auto last = text.find_last_not_of(" \t\r\n");
    if (first == std::string::npos) {
        return std::nullopt;
    }
    const auto digits = text.substr(first, last - first + 1);
    if (digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return std::nullopt;
    }
    const auto value = std::stoull(digits);
    if (value == 0) {
        return std::nullopt;
    }
    return value;
}

std::string bounded_guest_text(std::string_view text) {
    return bounded_utf8(text, kEchoedGuestChars);
}

std::string request_path(const GuestRunLayout& layout, std::uint64_t id, std::string_view what) {
    return join_guest_path(layout.calls, fmt::format("{:04d}.{}.json", id, what));
}

struct StopOutcome {
    std::string signal;
    std::string reach;
};

// Kills the program: its session's process group when the launcher made one and recorded it,
// else its pid. Never throws; says what happened.
Task<StopOutcome> stop_program(Sandbox& sandbox, const GuestRunLayout& layout, bool made_session) {
    SmallFile pid;
    try {
        pid =
            co_await read_capped(sandbox, layout, layout.pid, kSmallFileCap, Clock::now() + kGrace);
    } catch (...) {
        co_return StopOutcome{"unknown", "nothing"};
    }
    if (pid.state == FileState::absent) {
        co_return StopOutcome{"absent", "nothing"};
    }
    const auto program = positive_number(pid.content);
    if (pid.state != FileState::present || !program) {
        co_return StopOutcome{"refused", "nothing"};
    }
    std::string target = std::to_string(*program);
    std::string reach = "program";
    if (made_session) {
        try {
            const auto session = co_await read_capped(sandbox, layout, layout.session,
                                                      kSmallFileCap, Clock::now() + kGrace);
            const auto group = session.state == FileState::present
                                   ? positive_number(session.content)
                                   : std::nullopt;
            if (group && *group > 1) {
                target = "-" + std::to_string(*group);
                reach = "group";
            }
        } catch (...) {
        }
    }
    try {
        ExecRequest request;
        request.command = fmt::format("kill -s KILL -- {} 2>/dev/null", target);
        request.working_directory = "/";
        request.timeout = Seconds{2.0};
        request.max_output_bytes = 4096;
        const auto result =
            co_await before(sandbox.exec(std::move(request)), Clock::now() + kGrace);
        if (result.exit_code != 0) {
            co_return StopOutcome{"refused", "nothing"};
        }
    } catch (...) {
        co_return StopOutcome{"refused", "nothing"};
    }
    co_return StopOutcome{"sent", reach};
}

// Removes the transport directory, refusing anything that is not strictly inside the run
// directory and apart from `work`. Never throws.
Task<void> remove_transport(Sandbox& sandbox, const GuestRunLayout& layout) {
    const auto inside = guest_path_relative_to(layout.transport, layout.directory);
    const bool apart = !guest_path_relative_to(layout.transport, layout.work) &&
                       !guest_path_relative_to(layout.work, layout.transport);
    if (!inside || inside->empty() || !apart) {
        co_return;
    }
    try {
        ExecRequest request;
        request.command = "rm -rf -- " + shell_quote(layout.transport);
        request.working_directory = "/";
        request.timeout = Seconds{10.0};
        request.max_output_bytes = 4096;
        co_await before(sandbox.exec(std::move(request)), Clock::now() + kRemovalBudget);
    } catch (...) {
    }
}

class RunSupervisor {
  public:
    RunSupervisor(Sandbox& sandbox, GuestRunLayout layout, HostToolDispatcher dispatcher,
                  HostToolRunOptions options)
        : sandbox_(sandbox),
          layout_(std::move(layout)),
          dispatcher_(std::move(dispatcher)),
          options_(std::move(options)),
          deadline_(Clock::now() + std::chrono::duration_cast<Clock::duration>(options_.timeout)) {}

    Task<ExecResult> run(std::string program_source) {
        try {
            co_await before(
                sandbox_.write_file(layout_.program, std::move(program_source), layout_.directory),
                deadline_);
            co_await before(
                sandbox_.write_file(layout_.shim,
                                    host_tool_shim(options_.tool_names, options_.call_timeout),
                                    layout_.directory),
                deadline_);
            co_await before(sandbox_.write_file(layout_.launcher,
                                                launcher_script(layout_, options_.interpreter),
                                                layout_.directory),
                            deadline_);
        } catch (const OwnDeadline&) {
            throw timeout_error("", StopOutcome{"absent", "nothing"});
        }

        ExecRequest launch;
        launch.command = "sh " + shell_quote(layout_.launcher);
        launch.working_directory = layout_.directory;
        launch.timeout = until(deadline_);
        launch.max_output_bytes = 4096;
        std::optional<ExecResult> launched;
        try {
            launched = co_await before(sandbox_.exec(std::move(launch)), deadline_);
        } catch (const OwnDeadline&) {
        } catch (const Timeout&) {
        }
        if (!launched) {
            co_return co_await expire();
        }
        if (launched->exit_code != 0) {
            if (launched->stderr_bytes.empty()) {
                launched->stderr_bytes = "the launcher did not start the program";
            }
            co_return *launched;
        }
        made_session_ = launched->stdout_bytes.find(kSessionMarker) != std::string::npos;

        for (;;) {
            if (Clock::now() >= deadline_) {
                co_return co_await expire();
            }
            std::optional<SmallFile> marker;
            try {
                marker = co_await read_capped(sandbox_, layout_, layout_.exit_code, kSmallFileCap,
                                              deadline_);
                if (marker->state == FileState::absent) {
                    co_await serve_ready_requests();
                }
            } catch (const OwnDeadline&) {
                continue;  // the loop's head decides
            }
            if (marker->state != FileState::absent) {
                co_return co_await complete(*marker);
            }
            co_await sleep_for(
                std::min(options_.poll_interval, std::max(until(deadline_), Seconds{0})));
        }
    }

    bool made_session() const { return made_session_; }

  private:
    SandboxProgramTimeout timeout_error(std::string output, StopOutcome stop) const {
        if (output.size() > kTimeoutOutputChars) {
            output.resize(kTimeoutOutputChars);
        }
        return SandboxProgramTimeout(
            fmt::format("the program did not finish within {:.3g} s and was stopped (kill {}, "
                        "reaching {}); raise the timeout or make the program faster",
                        options_.timeout.count(), stop.signal, stop.reach),
            replace_invalid_utf8(output), std::move(stop.signal), std::move(stop.reach));
    }

    // The deadline passed: one last look for the exit marker, else stop the program and raise.
    Task<ExecResult> expire() {
        try {
            const auto marker = co_await read_capped(sandbox_, layout_, layout_.exit_code,
                                                     kSmallFileCap, Clock::now() + kGrace);
            if (marker.state != FileState::absent) {
                co_return co_await complete(marker);
            }
        } catch (const OwnDeadline&) {
        }
        std::string output;
        try {
            const auto read = co_await read_capped(sandbox_, layout_, layout_.output,
                                                   options_.response_limits.max_total_bytes,
                                                   Clock::now() + kGrace);
            output = read.content;
        } catch (...) {
        }
        auto stop = co_await stop_program(sandbox_, layout_, made_session_);
        if (stop.signal == "absent") {
            stop.signal = "unrecorded";
        }
        throw timeout_error(std::move(output), std::move(stop));
    }

    Task<ExecResult> complete(const SmallFile& marker) {
        ExecResult result;
        const auto code =
            marker.state == FileState::present ? positive_number(marker.content) : std::nullopt;
        const auto trimmed_zero =
            marker.content.find_first_not_of("0 \t\r\n") == std::string::npos &&
            marker.content.find('0') != std::string::npos;
        result.exit_code = code ? static_cast<int>(*code) : (trimmed_zero ? 0 : 1);
        try {
            const auto output = co_await read_capped(sandbox_, layout_, layout_.output,
                                                     options_.response_limits.max_total_bytes,
                                                     std::max(deadline_, Clock::now() + kGrace));
            if (output.state == FileState::too_large) {
                result.stderr_bytes =
                    "the program's output was larger than the host reads back, so it was dropped";
            } else {
                result.stdout_bytes = output.content;
            }
        } catch (const OwnDeadline&) {
            result.stderr_bytes = "the program finished, but its output could not be read in time";
        }
        co_return result;
    }

    // Serves every request that is ready, strictly in id order.
    Task<void> serve_ready_requests() {
        while (requests_seen_ <= options_.max_calls) {
            const auto id = requests_seen_ + 1;
            const auto request =
                co_await read_capped(sandbox_, layout_, request_path(layout_, id, "request"),
                                     options_.response_limits.max_bytes_per_file, deadline_);
            if (request.state == FileState::absent) {
                co_return;
            }
            ++requests_seen_;
            std::optional<std::string> answer = co_await answer_to(id, request);
            if (answer) {
                co_await before(sandbox_.write_file(request_path(layout_, id, "response"),
                                                    std::move(*answer), layout_.directory),
                                std::max(deadline_, Clock::now() + kGrace));
            }
        }
    }

    static std::string refusal(std::string_view why) {
        return json::serialize(json::object{{"refusal", why}});
    }

    // The response body, or nullopt for an abandoned request (stepped over, never answered).
    Task<std::optional<std::string>> answer_to(std::uint64_t id, const SmallFile& request) {
        if (request.state == FileState::too_large) {
            co_return refusal("the request is larger than the host accepts");
        }
        if (!is_valid_utf8(request.content)) {
            co_return refusal("the request is not UTF-8");
        }
        json::value body;
        try {
            body = json::parse(request.content);
        } catch (const std::exception&) {
            co_return refusal("the request is not JSON");
        }
        if (!body.is_object()) {
            co_return refusal("the request is not a JSON object");
        }
        const auto& object = body.as_object();
        if (const auto* abandoned = object.if_contains("abandoned");
            abandoned && abandoned->is_bool() && abandoned->as_bool()) {
            co_return std::nullopt;
        }
        if (id > options_.max_calls) {
            co_return refusal(fmt::format("the run's cap of {} host-tool calls is exhausted",
                                          options_.max_calls));
        }
        const auto* name = object.if_contains("name");
        if (!name || !name->is_string()) {
            co_return refusal("the request names no tool");
        }
        json::object arguments;
        if (const auto* given = object.if_contains("arguments")) {
            if (!given->is_object()) {
                co_return refusal("the request's arguments are not a JSON object");
            }
            arguments = given->as_object();
        }
        const std::string tool(name->as_string().data(), name->as_string().size());
        DispatchResult result;
        try {
            result = co_await dispatcher_(tool, json::serialize(arguments));
        } catch (const std::exception&) {
            co_return refusal(
                fmt::format("the host tool '{}' failed; the reason is in the host's log",
                            bounded_guest_text(tool)));
        }
        if (!result.ok()) {
            co_return refusal(*result.refusal);
        }
        const auto value_json = result.value_json.value_or("null");
        try {
            (void)json::parse(value_json);
        } catch (const std::exception&) {
            co_return refusal(
                fmt::format("the host tool '{}' returned no valid JSON", bounded_guest_text(tool)));
        }
        const auto size = value_json.size() + kValueFramingBytes;
        if (size > options_.response_limits.max_bytes_per_file ||
            delivered_bytes_ + size > options_.response_limits.max_total_bytes) {
            co_return refusal(
                fmt::format("the answer of host tool '{}' is larger than the run's response limits",
                            bounded_guest_text(tool)));
        }
        delivered_bytes_ += size;
        co_return "{\"value\": " + value_json + "}";
    }

    Sandbox& sandbox_;
    GuestRunLayout layout_;
    HostToolDispatcher dispatcher_;
    HostToolRunOptions options_;
    Clock::time_point deadline_;
    bool made_session_ = false;
    std::uint64_t requests_seen_ = 0;
    std::uint64_t delivered_bytes_ = 0;
};

bool finite_positive(Seconds value) {
    return std::isfinite(value.count()) && value.count() > 0;
}

}  // namespace

Task<ExecResult> host_tool_calls_over_exec(Sandbox& sandbox, GuestRunLayout layout,
                                           std::string program_source,
                                           HostToolDispatcher dispatcher,
                                           HostToolRunOptions options) {
    if (!finite_positive(options.timeout) || !finite_positive(options.poll_interval)) {
        throw InvalidArgument(
            "host tools over exec need a timeout and a poll interval that are finite and above 0");
    }
    RunSupervisor supervisor(sandbox, layout, std::move(dispatcher), std::move(options));
    std::exception_ptr failure;
    std::optional<ExecResult> result;
    try {
        result = co_await supervisor.run(std::move(program_source));
    } catch (const OwnDeadline&) {
        failure = std::make_exception_ptr(SandboxProgramTimeout(
            "the program's run outlived its deadline during a transport call; raise the timeout",
            "", "unknown", "nothing"));
    } catch (...) {
        failure = std::current_exception();
    }
    if (failure) {
        // A failure other than our timeout may leave the program running: stop it unless it
        // already finished.
        bool timed_out = false;
        try {
            std::rethrow_exception(failure);
        } catch (const SandboxProgramTimeout&) {
            timed_out = true;
        } catch (...) {
        }
        if (!timed_out) {
            bool finished = false;
            try {
                const auto marker = co_await read_capped(sandbox, layout, layout.exit_code,
                                                         kSmallFileCap, Clock::now() + kGrace);
                finished = marker.state != FileState::absent;
            } catch (...) {
            }
            if (!finished) {
                co_await stop_program(sandbox, layout, supervisor.made_session());
            }
        }
    }
    co_await remove_transport(sandbox, layout);
    if (failure) {
        std::rethrow_exception(failure);
    }
    co_return std::move(*result);
}

Task<bool> reclaim_run(Sandbox& sandbox, GuestRunLayout layout, Seconds timeout) {
    if (!finite_positive(timeout)) {
        throw InvalidArgument("reclaiming a run needs a timeout that is finite and above 0");
    }
    for (const auto* path :
         {&layout.work, &layout.transport, &layout.program, &layout.shim, &layout.launcher,
          &layout.calls, &layout.output, &layout.exit_code, &layout.pid, &layout.session}) {
        if (!guest_path_relative_to(*path, layout.directory)) {
            co_return false;
        }
    }
    const auto parent = guest_dirname(layout.directory);
    if (layout.directory.empty() || layout.directory.front() != '/' || parent.empty() ||
        parent == layout.directory) {
        co_return false;
    }
    try {
        ExecRequest request;
        request.command = "rm -rf -- " + shell_quote(layout.directory);
        request.working_directory = parent;
        request.timeout = timeout;
        request.max_output_bytes = 4096;
        const auto result = co_await sandbox.exec(std::move(request));
        co_return result.exit_code == 0;
    } catch (const Error&) {
        co_return false;
    }
}

}  // namespace maf_sandbox
