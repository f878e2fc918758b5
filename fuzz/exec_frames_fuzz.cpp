// The frames an interactive exec's host sends after the request (runtime/wire/exec_protocol.hpp:
// 'i' stdin, 'W' window), read as the supervisor reads them, and the interactive fields of the
// request. Input: one flag byte (bit 0: the exec has a terminal), then frames as they come off the
// connection (type, 4-byte little-endian size, payload), the last one cut where the input ends.
//
// Properties, beyond not crashing: read_frame over a socket gives back exactly the frames the
// bytes hold, refusing one cut short or larger than the limit; parse_host_frame accepts only an
// 'i' within the chunk size (empty closes stdin, else its bytes verbatim) and, with a terminal, a
// 4-byte 'W' whose size writes back to the same payload; append_frame rebuilds the bytes read.
// Each accepted frame's payload is then also tried as an exec request: interactive fields that
// are accepted serialise and read back the same.
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cstdint>
#include <string>
#include <thread>

#include "fuzz_check.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace json = boost::json;
using fuzz::require;

void check_frame(char type, const std::string& payload, bool tty) {
    const auto frame = exec_wire::parse_host_frame(type, payload, tty);
    if (!frame) {
        require(type != exec_wire::kStdinMore || payload.size() > exec_wire::kMaxStdinChunk,
                "a stdin frame within the chunk size is taken");
        require(type != exec_wire::kResize || !tty || payload.size() != 4,
                "a 4-byte window frame on a terminal is taken");
        return;
    }
    switch (frame->kind) {
        case exec_wire::HostFrame::Kind::close_stdin:
            require(type == exec_wire::kStdinMore && payload.empty(),
                    "only an empty stdin frame closes stdin");
            break;
        case exec_wire::HostFrame::Kind::more_stdin:
            require(type == exec_wire::kStdinMore && !payload.empty() && frame->bytes == payload,
                    "a stdin frame carries its payload verbatim");
            break;
        case exec_wire::HostFrame::Kind::resize:
            require(type == exec_wire::kResize && tty &&
                        exec_wire::resize_payload(frame->rows, frame->cols) == payload,
                    "a window frame's size writes back to its payload");
            break;
    }
}

bool same_terminal(const ExecCall& a, const ExecCall& b) {
    return a.interactive == b.interactive && a.tty == b.tty &&
           (!a.tty || (a.rows == b.rows && a.cols == b.cols));
}

void check_request(const std::string& payload) {
    boost::system::error_code ec;
    const auto document = json::parse(payload, ec);
    if (ec) {
        return;
    }
    ExecCall call;
    try {
        call = exec_wire::exec_call_from_json(document);
    } catch (const std::exception&) {
        return;
    }
    const auto text = json::serialize(exec_wire::to_json(call));
    require(same_terminal(call, exec_wire::exec_call_from_json(json::parse(text))),
            "a request's interactive fields read back the same", text);
}

// The frames `bytes` holds as a writer would have sent them: each whole one, the last cut short.
struct Expected {
    std::vector<std::pair<char, std::string>> whole;
    bool cut = false;
};

Expected split(std::string_view bytes, std::uint32_t limit) {
    Expected out;
    while (!bytes.empty()) {
        if (bytes.size() < exec_wire::kFrameHeaderBytes) {
            out.cut = true;
            return out;
        }
        const auto size = exec_wire::frame_payload_size(bytes.data());
        if (size > limit || bytes.size() - exec_wire::kFrameHeaderBytes < size) {
            out.cut = true;
            return out;
        }
        out.whole.emplace_back(bytes[0],
                               std::string(bytes.substr(exec_wire::kFrameHeaderBytes, size)));
        bytes.remove_prefix(exec_wire::kFrameHeaderBytes + size);
    }
    return out;
}

void check_stream(std::string_view bytes, bool tty) {
    const auto expected = split(bytes, exec_wire::kMaxStdinChunk);
    int ends[2];
    require(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) == 0, "a socket pair");
    UniqueFd reader(ends[0]);
    // The writer runs beside the reader: a stream larger than the socket's buffer would block.
    std::thread writer([fd = ends[1], bytes] {
        UniqueFd own(fd);
        std::size_t sent = 0;
        while (sent < bytes.size()) {
            const auto n =
                ::send(own.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
            if (n <= 0) {
                return;  // the reader stopped at a refused frame
            }
            sent += static_cast<std::size_t>(n);
        }
    });
    std::string rebuilt;
    std::size_t read = 0;
    char type = 0;
    std::string payload;
    while (exec_wire::read_frame(reader.get(), type, payload, exec_wire::kMaxStdinChunk)) {
        require(read < expected.whole.size(), "no frame is read past the bytes' whole frames");
        require(type == expected.whole[read].first && payload == expected.whole[read].second,
                "each frame is read as it was written");
        exec_wire::append_frame(rebuilt, type, payload);
        check_frame(type, payload, tty);
        check_request(payload);
        ++read;
    }
    reader.reset();
    writer.join();
    require(read == expected.whole.size(), "every whole frame is read before the reading stops");
    require(rebuilt == bytes.substr(0, rebuilt.size()), "append_frame rebuilds the bytes read");
}

}  // namespace
}  // namespace maf_sandbox::runtime

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    const bool tty = (data[0] & 1) != 0;
    maf_sandbox::runtime::check_stream(
        std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), tty);
    return 0;
}
