// The emulator under a full state disk and concurrent overwrites: a create or delete refused for
// want of space leaves nothing half-done, both converge once space returns (no restart), an
// overwrite is atomic for readers, a failed upload leaves the old file, and an over-limit body is
// refused from its headers alone.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "emulator_fixture.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A small tmpfs mounted in a temporary directory, unmounted (lazily: a sandbox's mount namespace
// may still hold it) before the directory is removed.
class SmallTmpfs {
  public:
    explicit SmallTmpfs(const std::filesystem::path& at, const char* size) : path_(at) {
        std::filesystem::create_directories(path_);
        const std::string options = fmt::format("size={},mode=0755", size);
        if (::mount("maf-emu-test", path_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
            throw std::runtime_error(fmt::format("mounting a tmpfs: {}", std::strerror(errno)));
        }
    }
    ~SmallTmpfs() { ::umount2(path_.c_str(), MNT_DETACH); }
    const std::filesystem::path& path() const { return path_; }

    // Writes a filler file until the file system refuses more (ENOSPC); returns its size.
    std::uint64_t fill() {
        const auto filler = path_ / "filler";
        const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd < 0) {
            throw std::runtime_error("opening the filler");
        }
        std::uint64_t total = 0;
        for (const std::size_t chunk : {std::size_t{1} << 20, std::size_t{4096}, std::size_t{1}}) {
            const std::string bytes(chunk, 'x');
            for (;;) {
                const auto n = ::write(fd, bytes.data(), bytes.size());
                if (n <= 0) {
                    break;
                }
                total += static_cast<std::uint64_t>(n);
            }
        }
        ::close(fd);
        return total;
    }
    void free_space() { std::filesystem::remove(path_ / "filler"); }

  private:
    std::filesystem::path path_;
};

std::string slurp(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
}

std::vector<std::string> listed_ids(SdkClient& sdk, std::vector<std::string>* states = nullptr) {
    const auto r = sdk.call("GET", "/sandboxes");
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<std::string> ids;
    if (r.status != 200) {
        return ids;
    }
    for (const auto& s : SdkClient::body(r).at("value").as_array()) {
        ids.emplace_back(s.at("id").as_string());
        if (states != nullptr) {
            states->emplace_back(s.at("state").as_string());
        }
    }
    return ids;
}

const char* const kCreateBody =
    R"({"sourcesRef":{"diskImage":{"name":"host","isPublic":true}},"labels":{"scope":"disk"}})";

TEST(EmulatorRecovery, FullStateDiskRefusesWithoutResidueAndCreatesAndDeletesConvergeAfter) {
    TempDir dir;
    SmallTmpfs disk(dir.path() / "state", "64m");
    boost::asio::io_context io;
    EmulatorProcess emulator(disk.path());
    SdkClient sdk(io, disk.path() / "ca.pem", emulator.base_url());
    const auto kept = sdk.create();
    sdk.wait_for_state(kept, "Running");
    const std::string file = "/maf-sandbox/work/kept.bin";
    const std::string old_content(64 * 1024, 'o');
    ASSERT_EQ(sdk.call("PUT", "/sandboxes/" + kept + "/files", old_content,
                       "path=" + file + "&createDirs=true", "application/octet-stream")
                  .status,
              200);

    ASSERT_GT(disk.fill(), 0u);
    // The guest's files share the full disk: the overwrite fails, and the old file is whole.
    const auto upload =
        sdk.call("PUT", "/sandboxes/" + kept + "/files", std::string(512 * 1024, 'n'),
                 "path=" + file, "application/octet-stream");
    EXPECT_EQ(upload.status, 507) << upload.body;
    EXPECT_EQ(sdk.call("GET", "/sandboxes/" + kept + "/files", {}, "path=" + file).body,
              old_content);

    // A create the state disk cannot record is refused, and nothing of it lists.
    const auto refused = sdk.call("PUT", "/sandboxes", kCreateBody);
    EXPECT_EQ(refused.status, 507) << refused.body;
    EXPECT_EQ(refused.body.find(dir.path().string()), std::string::npos) << refused.body;
    EXPECT_EQ(listed_ids(sdk), std::vector<std::string>{kept});

    // A delete is accepted and the sandbox ends, though the disk cannot record it yet.
    EXPECT_EQ(sdk.call("DELETE", "/sandboxes/" + kept).status, 202);
    EXPECT_NE(slurp(disk.path() / "emulator" / "state.json").find(kept), std::string::npos)
        << "the disk took a write it had no room for";

    disk.free_space();
    // Without a restart: the deletion converges in memory and on disk.
    const auto deadline = Clock::now() + 60s;
    while (Clock::now() < deadline &&
           (!listed_ids(sdk).empty() ||
            slurp(disk.path() / "emulator" / "state.json").find(kept) != std::string::npos)) {
        std::this_thread::sleep_for(100ms);
    }
    EXPECT_TRUE(listed_ids(sdk).empty());
    EXPECT_EQ(slurp(disk.path() / "emulator" / "state.json").find(kept), std::string::npos);
    // And a create works again, end to end.
    const auto again = sdk.call("PUT", "/sandboxes", kCreateBody);
    ASSERT_EQ(again.status, 201) << again.body;
    const std::string id(SdkClient::body(again).at("id").as_string());
    sdk.wait_for_state(id, "Running");
    EXPECT_EQ(sdk.exec(id, "echo back").at("stdout").as_string(), "back\n");
    sdk.delete_all();
    EXPECT_TRUE(listed_ids(sdk).empty());
}

TEST(EmulatorRecovery, DeleteAcceptedOnAFullDiskIsNotStuckDeleting) {
    TempDir dir;
    SmallTmpfs disk(dir.path() / "state", "64m");
    boost::asio::io_context io;
    EmulatorProcess emulator(disk.path());
    SdkClient sdk(io, disk.path() / "ca.pem", emulator.base_url());
    std::vector<std::string> ids;
    for (int i = 0; i < 2; ++i) {
        ids.push_back(sdk.create(fmt::format(R"({{"scope":"stuck","thread":"t{}"}})", i)));
    }
    for (const auto& id : ids) {
        sdk.wait_for_state(id, "Running");
    }
    disk.fill();
    for (const auto& id : ids) {
        EXPECT_EQ(sdk.call("DELETE", "/sandboxes/" + id).status, 202);
    }
    disk.free_space();
    // No client retries the DELETE: the emulator finishes it, in memory and on disk.
    const auto gone = [&] {
        const auto state = slurp(disk.path() / "emulator" / "state.json");
        return listed_ids(sdk).empty() && state.find(ids[0]) == std::string::npos &&
               state.find(ids[1]) == std::string::npos;
    };
    const auto deadline = Clock::now() + 60s;
    while (Clock::now() < deadline && !gone()) {
        std::this_thread::sleep_for(100ms);
    }
    EXPECT_TRUE(listed_ids(sdk).empty());
    const auto state = slurp(disk.path() / "emulator" / "state.json");
    for (const auto& id : ids) {
        EXPECT_EQ(state.find(id), std::string::npos) << id;
    }
    // A restart finds nothing to resurrect.
    EXPECT_EQ(emulator.terminate() & 0x7f, 0);
    EmulatorProcess restarted(disk.path());
    SdkClient after(io, disk.path() / "ca.pem", restarted.base_url());
    EXPECT_TRUE(listed_ids(after).empty());
}

TEST(EmulatorFileWrites, AReaderNeverSeesATornFileDuringOverwrites) {
    TempDir dir;
    boost::asio::io_context io;
    EmulatorProcess emulator(dir.path());
    SdkClient sdk(io, dir.path() / "ca.pem", emulator.base_url());
    const auto id = sdk.create();
    sdk.wait_for_state(id, "Running");
    const std::string path = "path=/maf-sandbox/work/overwritten.bin";
    // Large enough that an in-place write is seen half done by a concurrent read.
    const std::string a(1 << 20, 'a');
    const std::string b(1 << 20, 'b');
    ASSERT_EQ(sdk.call("PUT", "/sandboxes/" + id + "/files", a, path + "&createDirs=true",
                       "application/octet-stream")
                  .status,
              200);
    std::atomic<bool> writing{true};
    std::atomic<int> write_failures{0};
    std::thread writer([&] {
        boost::asio::io_context writer_io;
        SdkClient w(writer_io, dir.path() / "ca.pem", emulator.base_url());
        for (int i = 0; i < 30; ++i) {
            const auto r = w.call("PUT", "/sandboxes/" + id + "/files", i % 2 == 0 ? b : a, path,
                                  "application/octet-stream");
            if (r.status != 200) {
                ++write_failures;
            }
        }
        writing = false;
    });
    int reads = 0;
    int torn = 0;
    // Bounded: the writer's 30 writes end the loop, and so does a cap on reads.
    while ((writing || reads == 0) && reads < 400) {
        const auto r = sdk.call("GET", "/sandboxes/" + id + "/files", {}, path);
        ++reads;
        if (r.status != 200 || (r.body != a && r.body != b)) {
            ++torn;
        }
    }
    writer.join();
    EXPECT_EQ(write_failures.load(), 0);
    EXPECT_GT(reads, 5);
    EXPECT_EQ(torn, 0) << torn << " of " << reads << " reads saw neither the old nor the new file";
    // The overwrites leave no staged sibling behind.
    const auto listing = SdkClient::body(sdk.call("GET", "/sandboxes/" + id + "/files/list", {},
                                                  "path=/maf-sandbox/work"))
                             .at("entries")
                             .as_array();
    ASSERT_EQ(listing.size(), 1u) << json::serialize(listing);
    EXPECT_EQ(listing[0].at("name").as_string(), "overwritten.bin");
    sdk.delete_all();
}

TEST(EmulatorFileWrites, OverwriteKeepsTheFilesModeAndAnInterruptedUploadChangesNothing) {
    TempDir dir;
    boost::asio::io_context io;
    EmulatorProcess emulator(dir.path(), {"--plain-http"});
    SdkClient sdk(io, {}, emulator.base_url());
    const auto id = sdk.create();
    sdk.wait_for_state(id, "Running");
    const std::string target =
        kGroup + "/sandboxes/" + id + "/files?path=/maf-sandbox/work/kept.txt&" + kApi;
    ASSERT_EQ(
        sdk.raw("PUT", target + "&createDirs=true&mode=0640", "old", "application/octet-stream")
            .status,
        200);
    ASSERT_EQ(sdk.raw("PUT", target, "new", "application/octet-stream").status, 200);
    EXPECT_EQ(sdk.exec(id, "stat -c %a /maf-sandbox/work/kept.txt").at("stdout").as_string(),
              "640\n");
    // An upload cut off mid-body: the client promises more bytes than it sends, then closes.
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(emulator.port());
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    const std::string head = fmt::format(
        "PUT {} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer test-token\r\n"
        "Content-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n",
        target);
    const std::string part(300000, 'p');
    ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(head.size()));
    ASSERT_EQ(::send(fd, part.data(), part.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(part.size()));
    ::close(fd);
    // A later request on a new connection is served after the cut one: the file is unchanged.
    EXPECT_EQ(sdk.exec(id, "cat /maf-sandbox/work/kept.txt").at("stdout").as_string(), "new");
    sdk.delete_all();
}

TEST(EmulatorHttp, OverLimitBodyIsRefused413FromItsHeadersAndTheConnectionClosesCleanly) {
    TempDir dir;
    EmulatorProcess emulator(dir.path(), {"--plain-http"});
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(emulator.port());
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    // Headers only: a server that waited for the body would never answer.
    const std::string head = fmt::format(
        "PUT {}/sandboxes/x/files?path=/big&{} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Authorization: Bearer test-token\r\nContent-Type: application/octet-stream\r\n"
        "Content-Length: {}\r\n\r\n",
        kGroup, kApi, 1ull << 30);
    ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(head.size()));
    std::string answer;
    bool closed = false;
    int error = 0;
    const auto deadline = Clock::now() + 20s;
    while (!closed && error == 0 && Clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 200) <= 0) {
            continue;
        }
        char buffer[4096];
        const auto n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n > 0) {
            answer.append(buffer, static_cast<std::size_t>(n));
            if (answer.find("\r\n\r\n") != std::string::npos) {
                // The client, told, sends a little of its body anyway, as one mid-write would.
                const std::string more(64 * 1024, 'b');
                ::send(fd, more.data(), more.size(), MSG_NOSIGNAL);
            }
        } else if (n == 0) {
            closed = true;
        } else {
            error = errno;
        }
    }
    ::close(fd);
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 413")) << answer;
    EXPECT_NE(answer.find("PayloadTooLarge"), std::string::npos) << answer;
    EXPECT_EQ(error, 0) << "the connection was reset: " << std::strerror(error);
    EXPECT_TRUE(closed) << "the server never closed the connection";
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
