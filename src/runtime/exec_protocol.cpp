// Framing and (de)serialisation of the exec wire, and the host-side client.
#include "maf_sandbox/runtime/exec_protocol.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/unique_fd.hpp"

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

}  // namespace

bool write_frame(int fd, char type, std::string_view payload) noexcept {
    char header[5];
    header[0] = type;
    const auto size = static_cast<std::uint32_t>(payload.size());
    for (int i = 0; i < 4; ++i) {
        header[1 + i] = static_cast<char>((size >> (8 * i)) & 0xFF);
    }
    // (perf) Header and payload in one sendmsg, so the peer wakes once per frame, not twice.
    iovec parts[2] = {{header, sizeof header}, {const_cast<char*>(payload.data()), payload.size()}};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = payload.empty() ? 1 : 2;
    ssize_t n = 0;
    do {
        n = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        return false;
    }
    // A short send (a large payload, a full socket buffer): the rest the plain way.
    const auto sent = static_cast<std::size_t>(n);
    if (sent < sizeof header) {
        return write_all(fd, header + sent, sizeof header - sent) &&
               write_all(fd, payload.data(), payload.size());
    }
    const auto done = sent - sizeof header;
    return write_all(fd, payload.data() + done, payload.size() - done);
}

bool read_frame(int fd, char& type, std::string& payload, std::uint32_t max_payload) {
    unsigned char header[5];
    if (!detail::read_exact(fd, reinterpret_cast<char*>(header), sizeof header)) {
        return false;
    }
    type = static_cast<char>(header[0]);
    std::uint32_t size = 0;
    for (int i = 0; i < 4; ++i) {
        size |= static_cast<std::uint32_t>(header[1 + i]) << (8 * i);
    }
    if (size > max_payload) {
        return false;
    }
    payload.resize(size);
    return detail::read_exact(fd, payload.data(), size);
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
    return json::object{{"status", status_name(reply.status)},
                        {"exit_code", reply.exit_code},
                        {"stdout_total", reply.stdout_total},
                        {"stderr_total", reply.stderr_total},
                        {"message", reply.message}};
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
}

}  // namespace exec_wire

namespace {

void validate(const ExecCall& call) {
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

[[noreturn]] void unreachable(const std::filesystem::path& socket, const std::string& what) {
    throw SandboxOutputUnreachable(fmt::format(
        "the sandbox's supervisor at {} {}; the sandbox may have expired or been disposed: "
        "acquire it again",
        socket.string(), what));
}

}  // namespace

ExecReply call_exec(const std::filesystem::path& socket, const ExecCall& call,
                    std::chrono::milliseconds grace) {
    validate(call);
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const auto path = socket.string();
    if (path.size() >= sizeof address.sun_path) {
        throw InvalidArgument(fmt::format("the supervisor socket path {} is too long", path));
    }
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        unreachable(socket, fmt::format("refused the connection ({})", std::strerror(errno)));
    }
    if (!exec_wire::write_frame(fd.get(), exec_wire::kRequest,
                                json::serialize(exec_wire::to_json(call))) ||
        !exec_wire::write_frame(fd.get(), exec_wire::kStdin, call.stdin_bytes)) {
        unreachable(socket, "hung up while receiving the request");
    }
    const auto deadline = std::chrono::steady_clock::now() + call.timeout + grace;
    ExecReply reply;
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
            unreachable(socket, "did not answer within the exec's timeout plus a grace period");
        }
        char type = 0;
        if (!exec_wire::read_frame(fd.get(), type, payload, exec_wire::kMaxRequestBytes)) {
            unreachable(socket, "hung up during the exec");
        }
        // The supervisor never sends more than the cap; the checks keep a confused peer bounded.
        if (type == exec_wire::kStdout) {
            if (reply.stdout_head.size() + payload.size() <= call.max_output_bytes) {
                reply.stdout_head += payload;
            }
        } else if (type == exec_wire::kStderr) {
            if (reply.stderr_head.size() + payload.size() <= call.max_output_bytes) {
                reply.stderr_head += payload;
            }
        } else if (type == exec_wire::kResult) {
            try {
                exec_wire::apply_result_json(json::parse(payload), reply);
            } catch (const std::exception& e) {
                unreachable(socket, fmt::format("sent a malformed result ({})", e.what()));
            }
            return reply;
        }
    }
}

}  // namespace maf_sandbox::runtime
