// The frames an interactive exec's host sends after the request ('i' stdin, 'W' window), as the
// supervisor reads them, and the framing both sides share: every malformed frame is refused, never
// half-read or taken for something else.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <string>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

namespace maf_sandbox::runtime {
namespace {

using exec_wire::HostFrame;
using exec_wire::parse_host_frame;

TEST(ExecWireHostFrames, AStdinFrameCarriesItsBytes) {
    const std::string payload("ab\0c", 4);
    const auto frame = parse_host_frame(exec_wire::kStdinMore, payload, false);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->kind, HostFrame::Kind::more_stdin);
    EXPECT_EQ(frame->bytes, payload);
}

TEST(ExecWireHostFrames, AnEmptyStdinFrameClosesStdin) {
    const auto frame = parse_host_frame(exec_wire::kStdinMore, "", true);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->kind, HostFrame::Kind::close_stdin);
}

TEST(ExecWireHostFrames, AStdinFrameOfTheChunkSizeIsTakenAndOneByteMoreIsRefused) {
    const std::string chunk(exec_wire::kMaxStdinChunk, 'x');
    EXPECT_TRUE(parse_host_frame(exec_wire::kStdinMore, chunk, false).has_value());
    EXPECT_FALSE(parse_host_frame(exec_wire::kStdinMore, chunk + "x", false).has_value());
}

TEST(ExecWireHostFrames, AWindowFrameOnATerminalGivesRowsThenColumnsLittleEndian) {
    const auto frame =
        parse_host_frame(exec_wire::kResize, std::string("\x19\x00\x5a\x00", 4), true);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->kind, HostFrame::Kind::resize);
    EXPECT_EQ(frame->rows, 25);
    EXPECT_EQ(frame->cols, 90);
    const auto widest =
        parse_host_frame(exec_wire::kResize, exec_wire::resize_payload(65535, 258), true);
    ASSERT_TRUE(widest.has_value());
    EXPECT_EQ(widest->rows, 65535);
    EXPECT_EQ(widest->cols, 258);
}

TEST(ExecWireHostFrames, AWindowFrameWithoutATerminalIsRefused) {
    EXPECT_FALSE(parse_host_frame(exec_wire::kResize, exec_wire::resize_payload(24, 80), false));
}

TEST(ExecWireHostFrames, AWindowFrameOfAnotherSizeThanFourBytesIsRefused) {
    for (const std::size_t size : {0u, 1u, 3u, 5u, 8u}) {
        EXPECT_FALSE(parse_host_frame(exec_wire::kResize, std::string(size, '\x01'), true))
            << size << " bytes";
    }
}

TEST(ExecWireHostFrames, EveryOtherFrameTypeIsRefused) {
    for (const char type : {exec_wire::kRequest, exec_wire::kStdin, exec_wire::kStdout,
                            exec_wire::kStderr, exec_wire::kResult, '\0', 'w', 'I', '\xff'}) {
        EXPECT_FALSE(parse_host_frame(type, "x", true)) << "type " << static_cast<int>(type);
        EXPECT_FALSE(parse_host_frame(type, "", true)) << "type " << static_cast<int>(type);
    }
}

TEST(ExecWireFraming, AnAppendedFrameAnnouncesItsPayloadSizeLittleEndian) {
    std::string out = "before";
    const std::string payload(0x0102, 'p');
    exec_wire::append_frame(out, exec_wire::kStdinMore, payload);
    ASSERT_EQ(out.size(), 6 + exec_wire::kFrameHeaderBytes + payload.size());
    EXPECT_EQ(out[6], exec_wire::kStdinMore);
    EXPECT_EQ(static_cast<unsigned char>(out[7]), 0x02);
    EXPECT_EQ(static_cast<unsigned char>(out[8]), 0x01);
    EXPECT_EQ(exec_wire::frame_payload_size(out.data() + 6), payload.size());
    EXPECT_EQ(out.substr(6 + exec_wire::kFrameHeaderBytes), payload);
}

TEST(ExecWireFraming, TheRequestPrefixIsTheRequestFrameThenTheStdinHeader) {
    ExecCall call;
    call.command = std::string("cat");
    call.stdin_bytes = "12345";
    const auto prefix = exec_wire::request_prefix(call);
    ASSERT_EQ(prefix[0], exec_wire::kRequest);
    const auto request_size = exec_wire::frame_payload_size(prefix.data());
    ASSERT_EQ(prefix.size(), 2 * exec_wire::kFrameHeaderBytes + request_size);
    const auto* stdin_header = prefix.data() + exec_wire::kFrameHeaderBytes + request_size;
    EXPECT_EQ(stdin_header[0], exec_wire::kStdin);
    EXPECT_EQ(exec_wire::frame_payload_size(stdin_header), 5u);
}

// One end of a socket pair holding `bytes` and then the peer's hang-up.
UniqueFd reader_of(const std::string& bytes) {
    int ends[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends), 0);
    UniqueFd reader(ends[0]);
    UniqueFd writer(ends[1]);
    EXPECT_EQ(::write(writer.get(), bytes.data(), bytes.size()),
              static_cast<ssize_t>(bytes.size()));
    return reader;
}

TEST(ExecWireFraming, AFrameIsReadWholeThenTheHangUpEndsTheReading) {
    std::string bytes;
    exec_wire::append_frame(bytes, exec_wire::kStdinMore, "hello");
    exec_wire::append_frame(bytes, exec_wire::kResize, exec_wire::resize_payload(3, 4));
    const auto fd = reader_of(bytes);
    char type = 0;
    std::string payload;
    ASSERT_TRUE(exec_wire::read_frame(fd.get(), type, payload, exec_wire::kMaxStdinChunk));
    EXPECT_EQ(type, exec_wire::kStdinMore);
    EXPECT_EQ(payload, "hello");
    ASSERT_TRUE(exec_wire::read_frame(fd.get(), type, payload, exec_wire::kMaxStdinChunk));
    EXPECT_EQ(type, exec_wire::kResize);
    EXPECT_EQ(payload, exec_wire::resize_payload(3, 4));
    EXPECT_FALSE(exec_wire::read_frame(fd.get(), type, payload, exec_wire::kMaxStdinChunk));
}

TEST(ExecWireFraming, AFrameAnnouncingMoreThanTheLimitIsRefusedBeforeItsPayloadIsRead) {
    const auto header =
        exec_wire::frame_header(exec_wire::kStdinMore, exec_wire::kMaxStdinChunk + 1);
    const auto fd = reader_of(std::string(header.data(), header.size()));
    char type = 0;
    std::string payload;
    EXPECT_FALSE(exec_wire::read_frame(fd.get(), type, payload, exec_wire::kMaxStdinChunk));
    EXPECT_TRUE(payload.empty());
}

TEST(ExecWireFraming, AFrameCutShortInItsHeaderOrItsPayloadIsRefused) {
    std::string whole;
    exec_wire::append_frame(whole, exec_wire::kStdinMore, "0123456789");
    for (const std::size_t cut :
         {std::size_t{1}, std::size_t{4}, std::size_t{5}, whole.size() - 1}) {
        const auto fd = reader_of(whole.substr(0, cut));
        char type = 0;
        std::string payload;
        EXPECT_FALSE(exec_wire::read_frame(fd.get(), type, payload, exec_wire::kMaxStdinChunk))
            << "cut at " << cut;
    }
}

TEST(ExecWireFraming, ResizePayloadsReadBackAndOtherSizesDoNot) {
    std::uint16_t rows = 0;
    std::uint16_t cols = 0;
    ASSERT_TRUE(exec_wire::parse_resize(exec_wire::resize_payload(513, 7), rows, cols));
    EXPECT_EQ(rows, 513);
    EXPECT_EQ(cols, 7);
    EXPECT_FALSE(exec_wire::parse_resize("abc", rows, cols));
    EXPECT_FALSE(exec_wire::parse_resize("abcde", rows, cols));
}

}  // namespace
}  // namespace maf_sandbox::runtime
