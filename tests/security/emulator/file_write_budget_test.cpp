// A file write's body is counted against the file plane's in-flight budget before the emulator
// reads it. The server reads a whole body (up to its 64 MiB cap) into memory before any route
// runs, so a budget first checked by the route let any number of parallel writes sit in the
// emulator's memory at once, uncounted. The write is now admitted from its head: the token, then
// the Content-Length taken from the budget; a chunked write, whose size is unknown until it has
// been read, is refused. Each case sends a head and no body: only an answer decided from the
// head can arrive. The emulator runs with the smallest budget it accepts (1 MiB), over plain
// HTTP on loopback, so that raw requests can stop where a client library never would.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>

#include "../../emulator/emulator_fixture.hpp"
#include "polling.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

using namespace std::chrono_literals;
using maf_sandbox::testing::poll_until;

constexpr std::size_t kBudget = 1024 * 1024;

// One loopback connection to the emulator, closed with the object.
class Connection {
  public:
    explicit Connection(std::uint16_t port)
        : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(port);
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
            throw std::runtime_error("connecting to the emulator");
        }
    }
    ~Connection() { ::close(fd_); }
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    void send(std::string_view bytes) {
        while (!bytes.empty()) {
            const auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
            if (n <= 0) {
                throw std::runtime_error("sending to the emulator");
            }
            bytes.remove_prefix(static_cast<std::size_t>(n));
        }
    }

    // The status of the answer once its head has arrived within `limit`; nullopt if none did.
    std::optional<int> status_within(std::chrono::milliseconds limit) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (answer_.find("\r\n\r\n") == std::string::npos) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            pollfd p{fd_, POLLIN, 0};
            if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
                return std::nullopt;
            }
            char buffer[4096];
            const auto n = ::recv(fd_, buffer, sizeof buffer, 0);
            if (n <= 0) {
                return std::nullopt;
            }
            answer_.append(buffer, static_cast<std::size_t>(n));
        }
        if (!answer_.starts_with("HTTP/1.1 ")) {
            return 0;
        }
        return std::stoi(answer_.substr(9, 3));
    }

    // The whole answer of a Connection: close request.
    std::string rest() {
        for (;;) {
            pollfd p{fd_, POLLIN, 0};
            char buffer[16384];
            if (::poll(&p, 1, 30000) <= 0) {
                break;
            }
            const auto n = ::recv(fd_, buffer, sizeof buffer, 0);
            if (n <= 0) {
                break;
            }
            answer_.append(buffer, static_cast<std::size_t>(n));
        }
        const auto end = answer_.find("\r\n\r\n");
        return end == std::string::npos ? answer_ : answer_.substr(end + 4);
    }

  private:
    int fd_;
    std::string answer_;
};

std::string head(const std::string& method, const std::string& target,
                 const std::string& length_header, const std::string& token = "test-token") {
    return fmt::format(
        "{} {} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n"
        "Content-Type: application/octet-stream\r\n{}\r\nConnection: close\r\n\r\n",
        method, target, token, length_header);
}

// A whole request; (status, body).
std::pair<int, std::string> whole(std::uint16_t port, const std::string& method,
                                  const std::string& target, const std::string& body) {
    Connection c(port);
    c.send(head(method, target, fmt::format("Content-Length: {}", body.size())));
    c.send(body);
    const auto status = c.status_within(60s);
    return {status.value_or(0), c.rest()};
}

class FileWriteBudget : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new TempDir();
        emulator_ = new EmulatorProcess(
            dir_->path() / "state", {"--plain-http", "--token", "test-token", "--file-budget-bytes",
                                     std::to_string(kBudget)});
        const auto created =
            whole(port(), "PUT", kGroup + "/sandboxes?" + kApi,
                  R"({"sourcesRef":{"diskImage":{"name":"host","isPublic":true}}})");
        ASSERT_EQ(created.first, 201) << created.second;
        sandbox_ = new std::string(kGroup + "/sandboxes/" +
                                   std::string(json::parse(created.second).at("id").as_string()));
        ASSERT_TRUE(poll_until(
            [] {
                return whole(port(), "GET", *sandbox_ + "?" + kApi, {})
                           .second.find("\"Running\"") != std::string::npos;
            },
            60s, 100ms));
    }
    static void TearDownTestSuite() {
        if (sandbox_ != nullptr) {
            whole(port(), "DELETE", *sandbox_ + "?" + kApi, {});
            poll_until([] { return whole(port(), "GET", *sandbox_ + "?" + kApi, {}).first == 404; },
                       60s, 100ms);
        }
        delete sandbox_;
        delete emulator_;
        delete dir_;
    }

    static std::uint16_t port() { return emulator_->port(); }
    static std::string file_target(const std::string& name) {
        return *sandbox_ + "/files?path=/maf-sandbox/work/" + name + "&" + kApi;
    }

    static TempDir* dir_;
    static EmulatorProcess* emulator_;
    static std::string* sandbox_;
};

TempDir* FileWriteBudget::dir_ = nullptr;
EmulatorProcess* FileWriteBudget::emulator_ = nullptr;
std::string* FileWriteBudget::sandbox_ = nullptr;

TEST_F(FileWriteBudget, AWriteArrivingWhileTheBudgetIsHeldIsRefusedFromItsHead) {
    // Control: a write within the budget is admitted and lands byte for byte.
    const std::string content(kBudget / 2, 'a');
    ASSERT_EQ(whole(port(), "PUT", file_target("control.bin"), content).first, 200);
    const auto read = whole(port(), "GET", file_target("control.bin"), {});
    ASSERT_EQ(read.first, 200);
    EXPECT_EQ(read.second, content);

    // A write whose head declares the whole budget, its body still coming, holds the budget;
    // another write's head alone then gets its answer: 429 once the budget stayed full for a
    // second, with Retry-After. Should the second head be admitted before the first (the two
    // connections race), it is the first that is refused after its second: then both go again.
    std::unique_ptr<Connection> holder;
    std::optional<int> refused;
    std::string refusal;
    for (int attempt = 0; attempt < 5; ++attempt) {
        holder = std::make_unique<Connection>(port());
        holder->send(
            head("PUT", file_target("held.bin"), fmt::format("Content-Length: {}", kBudget)));
        holder->send(std::string(1024, 'h'));
        Connection prober(port());
        prober.send(head("PUT", file_target("probe.bin"), "Content-Length: 16"));
        refused = prober.status_within(10s);
        if (refused) {
            refusal = prober.rest();
            break;
        }
        if (holder->status_within(100ms) != 429) {
            break;  // the holder holds the budget, and the prober's head was never answered
        }
    }
    ASSERT_EQ(refused, 429)
        << "a write's head got no answer while the budget was held: its body was awaited first";
    EXPECT_NE(refusal.find("--file-budget-bytes"), std::string::npos) << refusal;

    // The holder finishes and its write lands; the budget is free again afterwards.
    holder->send(std::string(kBudget - 1024, 'h'));
    EXPECT_EQ(holder->status_within(60s), 200);
    EXPECT_EQ(whole(port(), "PUT", file_target("after.bin"), "after").first, 200);
    const auto held = whole(port(), "GET", file_target("held.bin"), {});
    EXPECT_EQ(held.second, std::string(1024, 'h') + std::string(kBudget - 1024, 'h'));
}

TEST_F(FileWriteBudget, AChunkedWriteIsRefusedBeforeItsBodyIsRead) {
    // Control: a chunked request to a route without a file body is still read and answered (an
    // exec whose body is sent in one chunk).
    {
        Connection c(port());
        const std::string body = R"({"command":"echo chunked"})";
        c.send(
            head("POST", *sandbox_ + "/executeShellCommand?" + kApi, "Transfer-Encoding: chunked"));
        c.send(fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", body.size(), body));
        EXPECT_EQ(c.status_within(60s), 200);
        EXPECT_NE(c.rest().find("chunked\\n"), std::string::npos);
    }
    Connection c(port());
    c.send(head("PUT", file_target("chunked.bin"), "Transfer-Encoding: chunked"));
    EXPECT_EQ(c.status_within(30s), 411) << "a chunked write's body was awaited";
    EXPECT_NE(c.rest().find("Content-Length"), std::string::npos);
}

TEST_F(FileWriteBudget, AWriteWithAWrongTokenIsRefusedBeforeItsBodyIsRead) {
    // Control: the right token with the body is admitted.
    ASSERT_EQ(whole(port(), "PUT", file_target("token.bin"), "ok").first, 200);
    Connection c(port());
    c.send(head("PUT", file_target("token.bin"), "Content-Length: 65536", "wrong-token"));
    EXPECT_EQ(c.status_within(30s), 401) << "an unauthenticated write's body was awaited";
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
