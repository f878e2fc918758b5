// The emulator under a full state disk and concurrent overwrites: a create or delete refused for
// want of space leaves nothing half-done, both converge once space returns (no restart), an
// overwrite is atomic for readers, a failed upload leaves the old file, and an over-limit body is
// refused from its headers alone.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "emulator_fixture.hpp"
#include "file_plane_staging.hpp"
#include "polling.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using maf_sandbox::testing::poll_until;

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
    // Sets `bytes` aside (before fill()), to hand back with release_reserve() on a full disk.
    void reserve(std::size_t bytes) { std::ofstream(path_ / "reserve") << std::string(bytes, 'r'); }
    void release_reserve() { std::filesystem::remove(path_ / "reserve"); }

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
    const auto listing = SdkClient::body(r);  // kept: the loop reads into it
    for (const auto& s : listing.at("value").as_array()) {
        ids.emplace_back(s.at("id").as_string());
        if (states != nullptr) {
            states->emplace_back(s.at("state").as_string());
        }
    }
    return ids;
}

// A loopback TCP connection to a --plain-http emulator, for requests no client library sends
// (a body cut short, headers without their body).
int connect_plain(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        throw std::runtime_error("connecting to the emulator");
    }
    return fd;
}

void send_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        const auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0) {
            throw std::runtime_error("sending to the emulator");
        }
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
}

// One whole request with Connection: close; returns (status, body).
std::pair<int, std::string> plain_request(std::uint16_t port, const std::string& method,
                                          const std::string& target, const std::string& body,
                                          const std::string& content_type) {
    const int fd = connect_plain(port);
    send_all(fd, fmt::format("{} {} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                             "test-token\r\nContent-Type: {}\r\nContent-Length: {}\r\n"
                             "Connection: close\r\n\r\n",
                             method, target, content_type, body.size()));
    send_all(fd, body);
    std::string answer;
    char buffer[16384];
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 30000) <= 0) {
            break;
        }
        const auto n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n <= 0) {
            break;
        }
        answer.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(fd);
    const auto end = answer.find("\r\n\r\n");
    if (!answer.starts_with("HTTP/1.1 ") || end == std::string::npos) {
        return {0, answer};
    }
    return {std::stoi(answer.substr(9, 3)), answer.substr(end + 4)};
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
    ASSERT_GT(disk.fill(), 0u);
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
    poll_until(
        [&] {
            return listed_ids(sdk).empty() &&
                   slurp(disk.path() / "emulator" / "state.json").find(kept) == std::string::npos;
        },
        60s, 100ms);
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
    poll_until(gone, 60s, 100ms);
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

TEST(EmulatorRecovery, ACreateWhoseLaunchFindsNoSpaceWaitsInCreatingAndRunsOnceSpaceReturns) {
    TempDir dir;
    SmallTmpfs disk(dir.path() / "state", "64m");
    boost::asio::io_context io;
    EmulatorProcess emulator(disk.path());
    SdkClient sdk(io, disk.path() / "ca.pem", emulator.base_url());
    // Room for the create's record, none for the runtime's files of a launch.
    disk.reserve(8192);
    disk.fill();
    disk.release_reserve();
    const auto r = sdk.call("PUT", "/sandboxes", kCreateBody);
    ASSERT_EQ(r.status, 201) << r.body;
    const std::string id(SdkClient::body(r).at("id").as_string());
    // The launch is retried, never given up as Failed while the disk is full.
    std::string state;
    const auto watch_until = Clock::now() + 3s;
    while (Clock::now() < watch_until) {
        state = SdkClient::body(sdk.call("GET", "/sandboxes/" + id)).at("state").as_string();
        ASSERT_EQ(state, "Creating") << slurp(emulator.log()).substr(0, 4000);
        std::this_thread::sleep_for(200ms);
    }
    disk.free_space();
    sdk.wait_for_state(id, "Running");
    EXPECT_EQ(sdk.exec(id, "echo launched").at("stdout").as_string(), "launched\n");
    sdk.delete_all();
    EXPECT_TRUE(listed_ids(sdk).empty());
}

std::string image_state(SdkClient& sdk, const std::string& id) {
    const auto r = sdk.call("GET", "/diskimages/" + id);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? std::string(SdkClient::body(r).at("status").at("state").as_string())
                           : std::string();
}

// An image the registry stand-in holds as r.io/tiny:1 (a rootfs tarball of 512 KiB), added to the
// emulator's state in `state` before its disk fills; an import copies it into the runtime's image
// store on the same disk. False when the tarball or the registry entry could not be made.
bool add_tiny_registry_image(const std::filesystem::path& work,
                             const std::filesystem::path& state) {
    const auto rootfs = work / "rootfs";
    std::filesystem::create_directories(rootfs / "etc");
    std::ofstream(rootfs / "etc" / "payload") << std::string(512 * 1024, 'p');
    const auto tarball = work / "rootfs.tar";
    return std::system(
               fmt::format("tar -C '{}' -cf '{}' .", rootfs.string(), tarball.string()).c_str()) ==
               0 &&
           std::system(fmt::format("'{}' images add '{}' --ref r.io/tiny:1 --state-dir '{}' "
                                   ">/dev/null",
                                   ACAS_EMULATOR_PATH, tarball.string(), state.string())
                           .c_str()) == 0;
}

TEST(EmulatorRecovery, ADiskImageImportThatFindsNoSpaceStaysPendingAndIsReadyOnceSpaceReturns) {
    TempDir dir;
    SmallTmpfs disk(dir.path() / "state", "64m");
    ASSERT_TRUE(add_tiny_registry_image(dir.path(), disk.path()));
    boost::asio::io_context io;
    EmulatorProcess emulator(disk.path());
    SdkClient sdk(io, disk.path() / "ca.pem", emulator.base_url());
    // Room for the image's Pending record, none for the import or for recording its outcome.
    disk.reserve(8192);
    disk.fill();
    disk.release_reserve();
    const auto r = sdk.call("PUT", "/diskimages",
                            R"({"image":{"base":"r.io/tiny:1"},"labels":{"name":"tiny"}})");
    ASSERT_EQ(r.status, 201) << r.body;
    const std::string id(SdkClient::body(r).at("id").as_string());
    // Retried, never given up as Failed while the disk is full (and never a host path).
    const auto watch_until = Clock::now() + 3s;
    while (Clock::now() < watch_until) {
        const auto answer = sdk.call("GET", "/diskimages/" + id);
        ASSERT_EQ(image_state(sdk, id), "Pending") << answer.body;
        EXPECT_EQ(answer.body.find(dir.path().string()), std::string::npos) << answer.body;
        std::this_thread::sleep_for(200ms);
    }
    disk.free_space();
    // Without a restart: Ready in memory, then on disk.
    std::string state;
    poll_until([&] { return (state = image_state(sdk, id)) != "Pending"; }, 60s, 100ms);
    EXPECT_EQ(state, "Ready") << slurp(emulator.log()).substr(0, 4000);
    const auto saved = [&] {
        const auto text = slurp(disk.path() / "emulator" / "state.json");
        const auto at = text.find(id);
        return at != std::string::npos && text.find("Ready", at) != std::string::npos;
    };
    poll_until(saved, 60s, 100ms);
    EXPECT_TRUE(saved()) << slurp(disk.path() / "emulator" / "state.json");
    EXPECT_EQ(sdk.call("DELETE", "/diskimages/" + id).status, 202);
}

// An emulator killed while an import is Pending (here held there by a full disk) imports it again
// when it restarts on the same state: the image becomes Ready rather than Pending for good.
TEST(EmulatorRecovery, AnImportPendingWhenTheEmulatorIsKilledIsResumedByTheRestart) {
    TempDir dir;
    SmallTmpfs disk(dir.path() / "state", "64m");
    ASSERT_TRUE(add_tiny_registry_image(dir.path(), disk.path()));
    boost::asio::io_context io;
    std::string id;
    {
        EmulatorProcess emulator(disk.path());
        SdkClient sdk(io, disk.path() / "ca.pem", emulator.base_url());
        disk.reserve(8192);
        disk.fill();
        disk.release_reserve();
        const auto r = sdk.call("PUT", "/diskimages",
                                R"({"image":{"base":"r.io/tiny:1"},"labels":{"name":"tiny"}})");
        ASSERT_EQ(r.status, 201) << r.body;
        id = std::string(SdkClient::body(r).at("id").as_string());
        const auto recorded = [&] {
            return slurp(disk.path() / "emulator" / "state.json").find(id) != std::string::npos;
        };
        ASSERT_TRUE(poll_until(recorded, 30s, 50ms));
        ASSERT_EQ(image_state(sdk, id), "Pending");
        ASSERT_EQ(::kill(emulator.pid(), SIGKILL), 0);
    }
    disk.free_space();
    EmulatorProcess restarted(disk.path());
    SdkClient sdk(io, disk.path() / "ca.pem", restarted.base_url());
    std::string state;
    poll_until([&] { return (state = image_state(sdk, id)) != "Pending"; }, 60s, 100ms);
    EXPECT_EQ(state, "Ready") << slurp(restarted.log()).substr(0, 4000);
    EXPECT_EQ(sdk.call("DELETE", "/diskimages/" + id).status, 202);
}

TEST(EmulatorFileWrites, AnUploadThatRunsOutOfSpaceLeavesTheOldFileWhole) {
    TempDir dir;
    boost::asio::io_context io;
    EmulatorProcess emulator(dir.path());
    SdkClient sdk(io, dir.path() / "ca.pem", emulator.base_url());
    const auto id = sdk.create();
    sdk.wait_for_state(id, "Running");
    const std::string query = "path=/tmp/kept.bin";
    const std::string old_content(64 * 1024, 'o');
    ASSERT_EQ(sdk.call("PUT", "/sandboxes/" + id + "/files", old_content, query,
                       "application/octet-stream")
                  .status,
              200);
    // The guest fills its own /tmp (a tmpfs of its disk budget) to the last page.
    const auto filled =
        sdk.exec(id,
                 "dd if=/dev/zero of=/tmp/filler bs=1M 2>/dev/null; "
                 "dd if=/dev/zero of=/tmp/filler2 bs=4k 2>/dev/null; "
                 "dd if=/dev/zero of=/tmp/filler3 bs=1 2>/dev/null; df -k /tmp | tail -1");
    const auto upload = sdk.call("PUT", "/sandboxes/" + id + "/files", std::string(512 * 1024, 'n'),
                                 query, "application/octet-stream");
    EXPECT_EQ(upload.status, 507) << upload.body << " " << json::serialize(filled);
    const auto after = sdk.call("GET", "/sandboxes/" + id + "/files", {}, query).body;
    EXPECT_TRUE(after == old_content)
        << "the old file was not left whole: " << after.size() << " bytes now";
    // Nothing staged is left behind, and once space returns the same upload lands.
    sdk.exec(id, "rm -f /tmp/filler /tmp/filler2 /tmp/filler3");
    EXPECT_EQ(sdk.exec(id, "ls -a /tmp | grep -c maf-stage").at("stdout").as_string(), "0\n");
    EXPECT_EQ(sdk.call("PUT", "/sandboxes/" + id + "/files", std::string(512 * 1024, 'n'), query,
                       "application/octet-stream")
                  .status,
              200);
    EXPECT_EQ(sdk.exec(id, "wc -c < /tmp/kept.bin").at("stdout").as_string(), "524288\n");
    sdk.delete_all();
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
    const std::string a(4 << 20, 'a');
    const std::string b(4 << 20, 'b');
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
    EmulatorProcess emulator(dir.path(), {"--plain-http"});
    const auto port = emulator.port();
    const auto created =
        plain_request(port, "PUT", kGroup + "/sandboxes?" + kApi, kCreateBody, "application/json");
    ASSERT_EQ(created.first, 201) << created.second;
    const std::string id(json::parse(created.second).at("id").as_string());
    const std::string sandbox = kGroup + "/sandboxes/" + id;
    const auto exec = [&](const std::string& command) {
        const auto r =
            plain_request(port, "POST", sandbox + "/executeShellCommand?" + kApi,
                          json::serialize(json::object{{"command", command}}), "application/json");
        EXPECT_EQ(r.first, 200) << r.second;
        return r.first == 200 ? std::string(json::parse(r.second).at("stdout").as_string())
                              : std::string();
    };
    const std::string target = sandbox + "/files?path=/maf-sandbox/work/kept.txt&" + kApi;
    ASSERT_TRUE(poll_until(
        [&] {
            return plain_request(port, "GET", sandbox + "?" + kApi, {}, "text/plain")
                       .second.find("\"Running\"") != std::string::npos;
        },
        60s, 100ms));
    ASSERT_EQ(plain_request(port, "PUT", target + "&createDirs=true&mode=0640", "old",
                            "application/octet-stream")
                  .first,
              200);
    ASSERT_EQ(plain_request(port, "PUT", target, "new", "application/octet-stream").first, 200);
    // The overwrite is a new inode in the old one's place, with the old one's mode.
    EXPECT_EQ(exec("stat -c %a /maf-sandbox/work/kept.txt"), "640\n");
    // An upload cut off mid-body: the client promises more bytes than it sends, then closes.
    const int fd = connect_plain(port);
    send_all(fd, fmt::format("PUT {} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                             "test-token\r\nContent-Type: application/octet-stream\r\n"
                             "Content-Length: 1000000\r\n\r\n",
                             target));
    send_all(fd, std::string(300000, 'p'));
    ::close(fd);
    // A request on a new connection, after the cut one: the file is unchanged.
    EXPECT_EQ(exec("cat /maf-sandbox/work/kept.txt"), "new");
    EXPECT_EQ(plain_request(port, "DELETE", sandbox + "?" + kApi, {}, "text/plain").first, 202);
    // Sandboxes outlive the emulator: wait (bounded) until this one is gone.
    EXPECT_TRUE(poll_until(
        [&] {
            return plain_request(port, "GET", sandbox + "?" + kApi, {}, "text/plain").first == 404;
        },
        30s, 100ms));
}

// What a crash between staging and the rename leaves: the staged sibling, named as the emulator
// names it (its writer long gone), in a directory of the guest. The next write to that directory
// after a restart removes it; files the guest named alike (a made-up tag, the bare prefix) stay.
TEST(EmulatorFileWrites, AStagedSiblingACrashLeftIsSweptByTheNextWriteAndLookAlikesAreKept) {
    TempDir dir;
    boost::asio::io_context io;
    std::string id;
    std::optional<staging::StageKey> key;
    {
        std::ifstream in(dir.path() / "emulator" / "stage.key", std::ios::binary);
        EXPECT_FALSE(in.good()) << "a fresh state directory has no key yet";
    }
    // Above the kernel's largest pid_max (2^22): no process ever has it, so the writer is gone.
    const pid_t gone_writer = 4194305;
    std::string leftover;
    const std::string forged =
        fmt::format(".maf-stage-{}-00000000000012ab-0000000000000000", gone_writer);
    const std::string prefixed = ".maf-stage-notes";
    {
        EmulatorProcess emulator(dir.path());
        SdkClient sdk(io, dir.path() / "ca.pem", emulator.base_url());
        id = sdk.create();
        sdk.wait_for_state(id, "Running");
        const auto secret = slurp(dir.path() / "emulator" / "stage.key");
        ASSERT_EQ(secret.size(), staging::kStageKeyBytes);
        key.emplace(std::span(reinterpret_cast<const std::uint8_t*>(secret.data()), secret.size()));
        leftover = staging::staged_name(*key, gone_writer, 0x12ab);
        ASSERT_TRUE(staging::staged_by(*key, leftover).has_value());
        ASSERT_FALSE(staging::staged_by(*key, forged).has_value());
        const auto planted = sdk.exec(
            id, fmt::format("mkdir -p /maf-sandbox/work/d && cd /maf-sandbox/work/d && "
                            "printf partial > {} && printf mine > {} && printf notes > {} && "
                            "chmod 600 {}",
                            leftover, forged, prefixed, leftover));
        ASSERT_EQ(planted.at("exitCode").as_int64(), 0) << json::serialize(planted);
        EXPECT_EQ(emulator.terminate() & 0x7f, 0);
    }
    EmulatorProcess restarted(dir.path());
    SdkClient sdk(io, dir.path() / "ca.pem", restarted.base_url());
    sdk.wait_for_state(id, "Running");
    const auto listing = [&] {
        return std::string(sdk.exec(id, "ls -A /maf-sandbox/work/d").at("stdout").as_string());
    };
    // The restart alone touches nothing in the guest's tree.
    EXPECT_NE(listing().find(leftover), std::string::npos) << listing();
    const auto put = sdk.call("PUT", "/sandboxes/" + id + "/files", "fresh",
                              "path=/maf-sandbox/work/d/new.txt", "application/octet-stream");
    ASSERT_EQ(put.status, 200) << put.body;
    const auto after = listing();
    EXPECT_EQ(after.find(leftover), std::string::npos) << after;
    EXPECT_NE(after.find(forged), std::string::npos)
        << "a guest's look-alike was removed: " << after;
    EXPECT_NE(after.find(prefixed + "\n"), std::string::npos) << after;
    EXPECT_NE(after.find("new.txt"), std::string::npos) << after;
    EXPECT_EQ(sdk.exec(id, "cat /maf-sandbox/work/d/new.txt").at("stdout").as_string(), "fresh");
    sdk.delete_all();
}

TEST(EmulatorHttp, OverLimitBodyIsRefused413FromItsHeadersAndTheConnectionClosesCleanly) {
    TempDir dir;
    EmulatorProcess emulator(dir.path(), {"--plain-http"});
    const int fd = connect_plain(emulator.port());
    // Headers only: a server that waited for the body would never answer.
    const std::string head = fmt::format(
        "PUT {}/sandboxes/x/files?path=/big&{} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Authorization: Bearer test-token\r\nContent-Type: application/octet-stream\r\n"
        "Content-Length: {}\r\n\r\n",
        kGroup, kApi, 1ull << 30);
    send_all(fd, head);
    std::string answer;
    bool closed = false;
    int error = 0;
    const auto read_some = [&](int timeout_ms) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, timeout_ms) <= 0) {
            return;
        }
        char buffer[4096];
        const auto n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n > 0) {
            answer.append(buffer, static_cast<std::size_t>(n));
        } else if (n == 0) {
            closed = true;
        } else {
            error = errno;
        }
    };
    const auto deadline = Clock::now() + 20s;
    while (answer.find("\r\n\r\n") == std::string::npos && !closed && error == 0 &&
           Clock::now() < deadline) {
        read_some(200);
    }
    // A client in the middle of writing its body goes on for a while before it reads the answer
    // (as one that writes the whole body first does): the server must still be reading it then,
    // not have reset the connection under it.
    const std::string more(64 * 1024, 'b');
    for (int chunk = 0; chunk < 5 && error == 0; ++chunk) {
        if (::send(fd, more.data(), more.size(), MSG_NOSIGNAL) < 0) {
            error = errno;
        }
        std::this_thread::sleep_for(150ms);  // the client's own pace, not a wait for the server
    }
    while (!closed && error == 0 && Clock::now() < deadline) {
        read_some(200);
    }
    ::close(fd);
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 413")) << answer;
    EXPECT_NE(answer.find("PayloadTooLarge"), std::string::npos) << answer;
    EXPECT_EQ(error, 0) << "the connection was reset: " << std::strerror(error);
    EXPECT_TRUE(closed) << "the server never closed the connection";
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
