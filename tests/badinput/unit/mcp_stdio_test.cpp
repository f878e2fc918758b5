// The MCP stdio transport fed malformed, wrongly typed and oversized JSON-RPC: each request gets a
// JSON-RPC error (the right code, its id where it had a valid one), nothing crashes, and the
// session keeps answering afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <thread>

#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/mcp/stdio_transport.hpp"
#include "mcp_harness.hpp"

namespace maf_sandbox::badinput {
namespace {

namespace json = boost::json;

class Pipe {
  public:
    Pipe() {
        if (::pipe(fds_) != 0) {
            throw std::runtime_error("pipe failed");
        }
    }
    ~Pipe() {
        close_read();
        close_write();
    }
    int read_end() const { return fds_[0]; }
    int write_end() const { return fds_[1]; }
    void close_read() {
        if (fds_[0] >= 0) {
            ::close(fds_[0]);
            fds_[0] = -1;
        }
    }
    void close_write() {
        if (fds_[1] >= 0) {
            ::close(fds_[1]);
            fds_[1] = -1;
        }
    }

  private:
    int fds_[2] = {-1, -1};
};

// Serves one stdio session over pipes: writes `input` (then EOF) from one thread, collects every
// answer line from another, and returns the answers once the session ended.
std::vector<json::object> serve(
    const std::string& input,
    std::size_t max_message_bytes = mcp::StdioOptions{}.max_message_bytes) {
    McpHarness harness;
    Pipe in;
    Pipe out;
    std::thread writer([&] {
        std::size_t written = 0;
        while (written < input.size()) {
            const auto n = ::write(in.write_end(), input.data() + written, input.size() - written);
            if (n <= 0) {
                break;
            }
            written += static_cast<std::size_t>(n);
        }
        in.close_write();
    });
    std::string output;
    std::thread reader([&] {
        char buffer[65536];
        for (;;) {
            const auto n = ::read(out.read_end(), buffer, sizeof buffer);
            if (n <= 0) {
                break;
            }
            output.append(buffer, static_cast<std::size_t>(n));
        }
    });
    boost::asio::io_context io;
    mcp::StdioOptions options;
    options.input_fd = in.read_end();
    options.output_fd = out.write_end();
    options.handle_signals = false;
    options.max_message_bytes = max_message_bytes;
    run_blocking(io, mcp::serve_stdio(*harness.server, options));
    writer.join();
    out.close_write();
    reader.join();
    std::vector<json::object> answers;
    std::size_t start = 0;
    while (start < output.size()) {
        const auto end = output.find('\n', start);
        const auto line = output.substr(start, end - start);
        boost::system::error_code ec;
        auto value = json::parse(line, ec);
        EXPECT_FALSE(ec) << "an answer is not JSON: " << line.substr(0, 200);
        if (!ec && value.is_object()) {
            answers.push_back(value.as_object());
        }
        start = end == std::string::npos ? output.size() : end + 1;
    }
    return answers;
}

const json::object* answer_with_id(const std::vector<json::object>& answers, std::int64_t id) {
    for (const auto& a : answers) {
        if (a.contains("id") && a.at("id").is_int64() && a.at("id").as_int64() == id) {
            return &a;
        }
    }
    return nullptr;
}

TEST(McpStdioBadInput, EachMalformedMessageGetsItsJsonRpcErrorAndTheSessionKeepsAnswering) {
    const auto cases = bad_messages();
    std::string input = kInitialize + "\n";
    for (const auto& bad : cases) {
        input += bad.text + "\n";
    }
    input += R"({"jsonrpc":"2.0","id":99,"method":"ping"})"
             "\n";
    const auto answers = serve(input);
    ASSERT_EQ(answers.size(), cases.size() + 2) << "every message is answered exactly once";
    // Stdio answers may arrive out of order (requests run concurrently): match by content.
    for (const auto& bad : cases) {
        bool found = false;
        for (const auto& a : answers) {
            if (const auto* error = a.if_contains("error");
                error && error->at("code").as_int64() == bad.code) {
                found = true;
            }
        }
        EXPECT_TRUE(found) << bad.name << ": no error with code " << bad.code;
    }
    const auto* ping = answer_with_id(answers, 99);
    ASSERT_NE(ping, nullptr) << "the session stopped answering after the bad input";
    EXPECT_TRUE(ping->contains("result"));
}

TEST(McpStdioBadInput, AnOversizedMessageIsAnsweredAndTheSessionContinues) {
    // 8 MiB of parameter text in one request, then 8 MiB of garbage, then a ping.
    const std::string big(8u << 20, 'x');
    const std::string input =
        kInitialize + "\n" +
        R"({"jsonrpc":"2.0","id":1,"method":"no-such-method","params":{"p":")" + big + "\"}}\n" +
        big + "\n" +
        R"({"jsonrpc":"2.0","id":2,"method":"ping"})"
        "\n";
    const auto answers = serve(input);
    const auto* unknown = answer_with_id(answers, 1);
    ASSERT_NE(unknown, nullptr);
    EXPECT_EQ(unknown->at("error").at("code").as_int64(), -32601);
    EXPECT_LT(unknown->at("error").at("message").as_string().size(), 400u)
        << "the error echoes the oversized input";
    const auto* ping = answer_with_id(answers, 2);
    ASSERT_NE(ping, nullptr);
    EXPECT_TRUE(ping->contains("result"));
}

TEST(McpStdioBadInput, ALineOverTheBoundIsAParseErrorAndIsDroppedUnread) {
    // With a 64 KiB bound: 1 MiB in one request, 1 MiB with no JSON at all, then a ping; and a
    // last line over the bound with no newline before the end of input.
    const std::string big(1u << 20, 'x');
    const std::string input =
        kInitialize + "\n" +
        R"({"jsonrpc":"2.0","id":1,"method":"no-such-method","params":{"p":")" + big + "\"}}\n" +
        big + "\n" +
        R"({"jsonrpc":"2.0","id":2,"method":"ping"})"
        "\n" +
        big;
    const auto answers = serve(input, 64u << 10);
    ASSERT_EQ(answers.size(), 5u) << "initialize, three refusals and the ping";
    EXPECT_EQ(answer_with_id(answers, 1), nullptr) << "the oversized request was not handled";
    int refusals = 0;
    for (const auto& a : answers) {
        if (const auto* error = a.if_contains("error")) {
            EXPECT_EQ(error->at("code").as_int64(), -32700);
            EXPECT_TRUE(a.at("id").is_null());
            EXPECT_NE(error->at("message").as_string().find("65536"), std::string::npos);
            ++refusals;
        }
    }
    EXPECT_EQ(refusals, 3);
    const auto* ping = answer_with_id(answers, 2);
    ASSERT_NE(ping, nullptr) << "the session stopped answering after an oversized line";
    EXPECT_TRUE(ping->contains("result"));
}

}  // namespace
}  // namespace maf_sandbox::badinput
