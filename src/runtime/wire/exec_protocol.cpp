// Framing and (de)serialisation of the exec wire, and the host-side client.
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "../kernel/fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

namespace json = boost::json;

namespace exec_wire {

namespace {

bool write_all(int fd, const char* data, std::size_t size) noexcept {
    while (size > 0) {
        const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}

// (perf) Both parts in one sendmsg, so the peer wakes once, not twice.
bool send_both(int fd, std::string_view first, std::string_view second) noexcept {
    iovec parts[2] = {{const_cast<char*>(first.data()), first.size()},
                      {const_cast<char*>(second.data()), second.size()}};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = second.empty() ? 1 : 2;
    ssize_t n = 0;
    do {
        n = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        return false;
    }
    // A short send (a large payload, a full socket buffer): the rest the plain way.
    const auto sent = static_cast<std::size_t>(n);
    if (sent < first.size()) {
        return write_all(fd, first.data() + sent, first.size() - sent) &&
               write_all(fd, second.data(), second.size());
    }
    const auto done = sent - first.size();
    return write_all(fd, second.data() + done, second.size() - done);
}

}  // namespace

std::array<char, kFrameHeaderBytes> frame_header(char type, std::uint32_t payload_size) noexcept {
    std::array<char, kFrameHeaderBytes> header{};
    header[0] = type;
    for (int i = 0; i < 4; ++i) {
        header[1 + i] = static_cast<char>((payload_size >> (8 * i)) & 0xFF);
    }
    return header;
}

std::uint32_t frame_payload_size(const char* header) noexcept {
    std::uint32_t size = 0;
    for (int i = 0; i < 4; ++i) {
        size |= static_cast<std::uint32_t>(static_cast<unsigned char>(header[1 + i])) << (8 * i);
    }
    return size;
}

void append_frame(std::string& out, char type, std::string_view payload) {
    const auto header = frame_header(type, static_cast<std::uint32_t>(payload.size()));
    out.append(header.data(), header.size());
    out += payload;
}

bool write_frame(int fd, char type, std::string_view payload) noexcept {
    const auto header = frame_header(type, static_cast<std::uint32_t>(payload.size()));
    return send_both(fd, std::string_view(header.data(), header.size()), payload);
}

bool read_frame(int fd, char& type, std::string& payload, std::uint32_t max_payload) {
    char header[kFrameHeaderBytes];
    if (!detail::read_exact(fd, header, sizeof header)) {
        return false;
    }
    type = header[0];
    const auto size = frame_payload_size(header);
    if (size > max_payload) {
        return false;
    }
    payload.resize(size);
    return detail::read_exact(fd, payload.data(), size);
}

std::string request_prefix(const ExecCall& call) {
    const auto request = json::serialize(to_json(call));
    const auto stdin_header =
        frame_header(kStdin, static_cast<std::uint32_t>(call.stdin_bytes.size()));
    std::string prefix;
    prefix.reserve(2 * kFrameHeaderBytes + request.size());
    append_frame(prefix, kRequest, request);
    prefix.append(stdin_header.data(), stdin_header.size());
    return prefix;
}

std::string resize_payload(std::uint16_t rows, std::uint16_t cols) {
    return std::string{static_cast<char>(rows & 0xFF), static_cast<char>(rows >> 8),
                       static_cast<char>(cols & 0xFF), static_cast<char>(cols >> 8)};
}

bool parse_resize(std::string_view payload, std::uint16_t& rows, std::uint16_t& cols) noexcept {
    if (payload.size() != 4) {
        return false;
    }
    const auto byte = [&](std::size_t i) {
        return static_cast<std::uint16_t>(static_cast<unsigned char>(payload[i]));
    };
    rows = static_cast<std::uint16_t>(byte(0) | (byte(1) << 8));
    cols = static_cast<std::uint16_t>(byte(2) | (byte(3) << 8));
    return true;
}

std::optional<HostFrame> parse_host_frame(char type, std::string_view payload, bool tty) noexcept {
    HostFrame frame;
    if (type == kStdinMore && payload.size() <= kMaxStdinChunk) {
        frame.kind = payload.empty() ? HostFrame::Kind::close_stdin : HostFrame::Kind::more_stdin;
        frame.bytes = payload;
        return frame;
    }
    if (type == kResize && tty && parse_resize(payload, frame.rows, frame.cols)) {
        frame.kind = HostFrame::Kind::resize;
        return frame;
    }
    return std::nullopt;
}

json::value to_json(const ExecCall& call) {
    json::object out;
    if (const auto* argv = std::get_if<std::vector<std::string>>(&call.command)) {
        json::array items;
        for (const auto& arg : *argv) {
            items.emplace_back(arg);
        }
        out["argv"] = std::move(items);
    } else {
        out["shell"] = std::get<std::string>(call.command);
    }
    out["cwd"] = call.cwd;
    json::array env;
    for (const auto& [key, value] : call.env) {
        env.emplace_back(json::array{json::string(key), json::string(value)});
    }
    out["env"] = std::move(env);
    out["max_output_bytes"] = call.max_output_bytes;
    out["timeout_ms"] = call.timeout.count();
    out["wait_for_output_eof"] = call.wait_for_output_eof;
    out["kill_past_output_cap"] = call.kill_past_output_cap;
    if (call.interactive || call.tty) {
        out["interactive"] = true;
    }
    if (call.tty) {
        out["tty"] = true;
        out["rows"] = call.rows;
        out["cols"] = call.cols;
    }
    return out;
}

ExecCall exec_call_from_json(const json::value& value) {
    const auto& in = value.as_object();
    ExecCall call;
    if (const auto* argv = in.if_contains("argv")) {
        std::vector<std::string> items;
        for (const auto& item : argv->as_array()) {
            items.emplace_back(item.as_string());
        }
        call.command = std::move(items);
    } else {
        call.command = std::string(in.at("shell").as_string());
    }
    call.cwd = std::string(in.at("cwd").as_string());
    for (const auto& pair : in.at("env").as_array()) {
        const auto& kv = pair.as_array();
        call.env.emplace_back(std::string(kv.at(0).as_string()), std::string(kv.at(1).as_string()));
    }
    call.max_output_bytes = in.at("max_output_bytes").to_number<std::uint64_t>();
    call.timeout = std::chrono::milliseconds(in.at("timeout_ms").to_number<std::int64_t>());
    // Absent in requests from hosts built before these options existed.
    if (const auto* v = in.if_contains("wait_for_output_eof"); v != nullptr && v->is_bool()) {
        call.wait_for_output_eof = v->as_bool();
    }
    if (const auto* v = in.if_contains("kill_past_output_cap"); v != nullptr && v->is_bool()) {
        call.kill_past_output_cap = v->as_bool();
    }
    // Absent from non-interactive requests; present, they must say yes or no (as_bool throws).
    if (const auto* v = in.if_contains("interactive")) {
        call.interactive = v->as_bool();
    }
    if (const auto* v = in.if_contains("tty")) {
        call.tty = v->as_bool();
        call.interactive = call.interactive || call.tty;
    }
    if (call.tty) {
        call.rows = in.at("rows").to_number<std::uint16_t>();
        call.cols = in.at("cols").to_number<std::uint16_t>();
    }
    return call;
}

namespace {
std::string_view status_name(ExecStatus status) {
    switch (status) {
        case ExecStatus::exited:
            return "exited";
        case ExecStatus::timed_out:
            return "timed_out";
        case ExecStatus::failed:
            break;
    }
    return "failed";
}
}  // namespace

json::value to_json(const ExecReply& reply) {
    return json::object{{"status", status_name(reply.status)}, {"exit_code", reply.exit_code},
                        {"stdout_total", reply.stdout_total},  {"stderr_total", reply.stderr_total},
                        {"oom_kills", reply.oom_kills},        {"message", reply.message}};
}

void apply_result_json(const json::value& value, ExecReply& reply) {
    const auto& in = value.as_object();
    const auto status = in.at("status").as_string();
    reply.status = status == "exited"      ? ExecStatus::exited
                   : status == "timed_out" ? ExecStatus::timed_out
                                           : ExecStatus::failed;
    reply.exit_code = in.at("exit_code").to_number<int>();
    reply.stdout_total = in.at("stdout_total").to_number<std::uint64_t>();
    reply.stderr_total = in.at("stderr_total").to_number<std::uint64_t>();
    reply.message = std::string(in.at("message").as_string());
    // Absent from supervisors built before they counted them.
    if (const auto* kills = in.if_contains("oom_kills"); kills != nullptr && kills->is_number()) {
        reply.oom_kills = kills->to_number<std::uint64_t>();
    }
}

}  // namespace exec_wire

void validate_exec_call(const ExecCall& call) {
    const auto refuse_nul = [](std::string_view text, std::string_view what) {
        if (text.find('\0') != std::string_view::npos) {
            throw InvalidArgument(
                fmt::format("the exec's {} contains a NUL byte; remove it", what));
        }
    };
    if (const auto* argv = std::get_if<std::vector<std::string>>(&call.command)) {
        if (argv->empty()) {
            throw InvalidArgument("the exec's argv is empty; name a program to run");
        }
        for (const auto& arg : *argv) {
            refuse_nul(arg, "argv");
        }
    } else {
        refuse_nul(std::get<std::string>(call.command), "command");
    }
    refuse_nul(call.cwd, "working directory");
    if (!call.cwd.empty() && call.cwd.front() != '/') {
        throw InvalidArgument(
            fmt::format("the exec's working directory '{}' is not absolute", call.cwd));
    }
    for (const auto& [key, value] : call.env) {
        refuse_nul(key, "environment");
        refuse_nul(value, "environment");
        if (key.empty() || key.find('=') != std::string::npos) {
            throw InvalidArgument(
                fmt::format("environment name '{}' is empty or contains '='", key));
        }
    }
}

sockaddr_un supervisor_address(const std::filesystem::path& socket) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const auto path = socket.string();
    if (path.size() >= sizeof address.sun_path) {
        throw InvalidArgument(fmt::format("the supervisor socket path {} is too long", path));
    }
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    return address;
}

int connect_supervisor(const std::filesystem::path& socket) {
    const auto address = supervisor_address(socket);
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd ||
        ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        throw_exec_link_failure(socket, ExecLinkFailure::refused, std::strerror(errno));
    }
    return fd.release();
}

void throw_exec_link_failure(const std::filesystem::path& socket, ExecLinkFailure failure,
                             std::string_view detail) {
    std::string what;
    switch (failure) {
        case ExecLinkFailure::refused:
            what = fmt::format("refused the connection ({})", detail);
            break;
        case ExecLinkFailure::hung_up_on_request:
            what = "hung up while receiving the request";
            break;
        case ExecLinkFailure::hung_up:
            what = "hung up during the exec";
            break;
        case ExecLinkFailure::no_answer:
            what = "did not answer within the exec's timeout plus a grace period";
            break;
        case ExecLinkFailure::malformed_result:
            what = fmt::format("sent a malformed result ({})", detail);
            break;
    }
    throw SandboxOutputUnreachable(fmt::format(
        "the sandbox's supervisor at {} {}; the sandbox may have expired or been disposed: "
        "acquire it again",
        socket.string(), what));
}

ExecReplyCollector::ExecReplyCollector(std::filesystem::path socket, std::uint64_t max_output_bytes)
    : socket_(std::move(socket)), max_output_bytes_(max_output_bytes) {}

bool ExecReplyCollector::take(char type, std::string_view payload) {
    // The supervisor never sends more than the cap; the checks keep a confused peer bounded.
    if (type == exec_wire::kStdout) {
        if (reply_.stdout_head.size() + payload.size() <= max_output_bytes_) {
            reply_.stdout_head += payload;
        }
    } else if (type == exec_wire::kStderr) {
        if (reply_.stderr_head.size() + payload.size() <= max_output_bytes_) {
            reply_.stderr_head += payload;
        }
    } else if (type == exec_wire::kResult) {
        try {
            exec_wire::apply_result_json(json::parse(payload), reply_);
        } catch (const std::exception& e) {
            throw_exec_link_failure(socket_, ExecLinkFailure::malformed_result, e.what());
        }
        return true;
    }
    return false;
}

ExecReply call_exec(const std::filesystem::path& socket, const ExecCall& call,
                    std::chrono::milliseconds grace, const ExecOutputCallback& on_output) {
    validate_exec_call(call);
    UniqueFd fd(connect_supervisor(socket));
    if (!exec_wire::send_both(fd.get(), exec_wire::request_prefix(call), call.stdin_bytes)) {
        throw_exec_link_failure(socket, ExecLinkFailure::hung_up_on_request);
    }
    const auto deadline = std::chrono::steady_clock::now() + call.timeout + grace;
    ExecReplyCollector collector(socket, call.max_output_bytes);
    std::string payload;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd pfd{fd.get(), POLLIN, 0};
        const int ready =
            ::poll(&pfd, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready == 0) {
            throw_exec_link_failure(socket, ExecLinkFailure::no_answer);
        }
        char type = 0;
        if (!exec_wire::read_frame(fd.get(), type, payload, exec_wire::kMaxRequestBytes)) {
            throw_exec_link_failure(socket, ExecLinkFailure::hung_up);
        }
        if (collector.take(type, payload)) {
            return std::move(collector.reply());
        }
        if (on_output && (type == exec_wire::kStdout || type == exec_wire::kStderr)) {
            on_output(type, payload);
        }
    }
}

}  // namespace maf_sandbox::runtime
