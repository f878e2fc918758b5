// The emulator's state directory is trusted, its records are not. A state directory another user
// owns or can write, or a planted `tls` link, is refused before anything in it is read or written;
// a record in a directory that is ours still names only the sandbox's own directory, socket,
// cgroups and PID 1 before the emulator kills or removes anything; and a listener off loopback
// needs both a token and --allow-remote. Victims are the test's own: a process in a cgroup it made,
// an empty cgroup it made, and a root-owned 0700 directory. Each case first shows the benign state
// working.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>

#include "../../emulator/emulator_fixture.hpp"
#include "../forgery_victims.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

namespace fs = std::filesystem;
using security::forgery::as_nobody;
using security::forgery::run_command;
using security::forgery::TmpName;
using security::forgery::Victims;

constexpr const char* kSandboxId = "aaaaaaaa-0000-4000-8000-000000000001";
constexpr const char* kRuntimeId = "aaaaaaaa000040008000000000000001";

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
}

// The emulator's state.json with one sandbox in `state`; with `victims`, its handle names them.
std::string state_json(const std::string& state, const Victims* victims, const fs::path& claims) {
    std::string handle = "{}";
    if (victims != nullptr) {
        handle = fmt::format(
            R"({{"pid":{pid},"startTime":{start},"rootUid":2000000000,"rootGid":2000000000,)"
            R"("runtime":{{"cgroup_paths":["{busy}","{empty}"],"cgroup_layout":"{layout}",)"
            R"("sandbox_dir":"{dir}","socket":"{dir}/exec.sock","guest_host_uid":2000000000,)"
            R"("guest_host_gid":2000000000,"sandbox_id":"{rid}","id_base":2000000000,)"
            R"("id_count":65536,"id_claims_dir":"{claims}"}}}})",
            fmt::arg("pid", victims->pid()), fmt::arg("start", victims->start_time()),
            fmt::arg("busy", victims->busy_cgroup().string()),
            fmt::arg("empty", victims->empty_cgroup().string()),
            fmt::arg("layout", security::forgery::layout_name()),
            fmt::arg("dir", victims->dir().string()), fmt::arg("rid", kRuntimeId),
            fmt::arg("claims", claims.string()));
    }
    return fmt::format(
        R"({{"version":1,"diskImages":{{}},"sandboxes":{{"{id}":{{"id":"{id}","group":"{group}",)"
        R"("labels":{{}},"state":"{state}","stoppedReason":"","stoppedAt":"",)"
        R"("createdAt":"2026-01-01T00:00:00+00:00",)"
        R"("sourcesRef":{{"diskImage":{{"name":"host","isPublic":true}}}},"resources":{{}},)"
        R"("egressPolicy":{{}},"lifecycle":{{}},"environment":{{}},"image":"host",)"
        R"("failure":"","lastActivity":0,"stateSince":0,"handle":{handle}}}}}}})",
        fmt::arg("id", kSandboxId), fmt::arg("group", lower(kGroup)), fmt::arg("state", state),
        fmt::arg("handle", handle));
}

std::string serve_command(const fs::path& state, const std::string& listen,
                          const std::string& extra = "--token T") {
    // A bound: an emulator that wrongly starts is stopped, so the case fails instead of hanging.
    return fmt::format("timeout 20 {} serve --listen {} --state-dir {} --self-signed {}",
                       ACAS_EMULATOR_PATH, listen, state.string(), extra);
}

mode_t mode_of(const fs::path& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(EmulatorStateTrust, StateDirOfAnEarlierVersionStillLoads) {
    TempDir temp;
    const fs::path state = temp.path() / "state";
    // As an earlier emulator left it: create_directories under umask 022, a failed sandbox.
    fs::create_directories(state / "emulator");
    ::chmod(state.c_str(), 0755);
    ::chmod((state / "emulator").c_str(), 0755);
    std::ofstream(state / "emulator" / "state.json") << state_json("Failed", nullptr, {});
    EmulatorProcess process(state, {"--token", "test-token"});
    boost::asio::io_context io;
    SdkClient sdk(io, process.ca_file(), process.base_url());
    const auto answer = sdk.call("GET", std::string("/sandboxes/") + kSandboxId);
    EXPECT_EQ(answer.status, 200) << answer.body;
    EXPECT_NE(answer.body.find("Failed"), std::string::npos) << answer.body;
    EXPECT_EQ(mode_of(state), 0700u);
    EXPECT_EQ(mode_of(state / "emulator"), 0700u);
    EXPECT_EQ(mode_of(state / "tls"), 0700u);
}

TEST(EmulatorStateTrust, StateDirAnotherUserOwnsIsRefusedBeforeAnyRecordIsActedOn) {
    Victims victims;
    TmpName evil("maf-sec-evil-emu");
    const auto forged = state_json("Deleting", &victims, evil.path() / "ids");
    ASSERT_TRUE(as_nobody([&] {
        return ::mkdir(evil.path().c_str(), 0777) == 0 &&
               ::mkdir((evil.path() / "emulator").c_str(), 0777) == 0 &&
               security::forgery::write_text(evil.path() / "emulator" / "state.json", forged);
    }));
    const auto result = run_command(serve_command(evil.path(), "127.0.0.1:0"));
    EXPECT_EQ(result.status, 2) << result.output;
    EXPECT_NE(result.output.find("owned by uid 65534"), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find("listening on"), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(evil.path() / "tls")) << "nothing is written into it";
    EXPECT_TRUE(victims.process_alive());
    EXPECT_TRUE(victims.cgroups_kept());
    EXPECT_TRUE(victims.dir_kept());
}

TEST(EmulatorStateTrust, ForgedHandleInOwnStateDirIsNeverActedOn) {
    TempDir temp;
    const fs::path state = temp.path() / "state";
    fs::create_directories(state / "emulator");
    ::chmod(state.c_str(), 0700);
    Victims victims;
    // A damaged (or root-forged) record in our own directory, in state Deleting: the emulator
    // deletes it at start, with no client request.
    std::ofstream(state / "emulator" / "state.json")
        << state_json("Deleting", &victims, temp.path() / "ids");
    EmulatorProcess process(state, {"--token", "test-token"});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    bool refused = false;
    while (!refused && std::chrono::steady_clock::now() < deadline) {
        refused = slurp(process.log()).find("which is not its own") != std::string::npos;
        if (!refused) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    EXPECT_TRUE(refused) << slurp(process.log());
    EXPECT_TRUE(process.alive());
    EXPECT_TRUE(victims.process_alive());
    EXPECT_TRUE(victims.cgroups_kept());
    EXPECT_TRUE(victims.dir_kept());
}

TEST(EmulatorStateTrust, PlantedTlsLinkIsRefused) {
    TempDir temp;
    const fs::path state = temp.path() / "state";
    fs::create_directories(state);
    ::chmod(state.c_str(), 0700);
    TmpName theirs("maf-sec-evil-tls");
    ASSERT_TRUE(as_nobody([&] { return ::mkdir(theirs.path().c_str(), 0777) == 0; }));
    fs::create_directory_symlink(theirs.path(), state / "tls");
    const auto result = run_command(serve_command(state, "127.0.0.1:0"));
    EXPECT_EQ(result.status, 2) << result.output;
    EXPECT_NE(result.output.find("symbolic link"), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(theirs.path() / "server-key.pem")) << "the key went to another user";
}

TEST(EmulatorStateTrust, NonLoopbackListenNeedsTokenAndAllowRemote) {
    TempDir temp;
    const fs::path state = temp.path() / "state";
    const auto no_token = run_command(serve_command(state, "0.0.0.0:0", ""));
    EXPECT_EQ(no_token.status, 2) << no_token.output;
    EXPECT_NE(no_token.output.find("not a loopback address"), std::string::npos) << no_token.output;
    const auto no_flag = run_command(serve_command(state, "0.0.0.0:0", "--token T"));
    EXPECT_EQ(no_flag.status, 2) << no_flag.output;
    EXPECT_NE(no_flag.output.find("--allow-remote"), std::string::npos) << no_flag.output;
    const auto flag_only = run_command(serve_command(state, "0.0.0.0:0", "--allow-remote"));
    EXPECT_EQ(flag_only.status, 2) << flag_only.output;
    // Both given: it serves (on loopback too, without either).
    EmulatorProcess remote(state, {"--listen", "0.0.0.0:0", "--token", "T", "--allow-remote"});
    EXPECT_TRUE(remote.alive());
    remote.terminate();
    EmulatorProcess local(temp.path() / "local");
    EXPECT_TRUE(local.alive());
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
