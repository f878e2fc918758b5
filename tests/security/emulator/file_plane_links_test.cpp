// The emulator's file plane as an attack surface (issue 17): a guest plants links (absolute,
// relative climbing, to /proc and /sys, dangling, swapped while the call runs) and a client then
// runs every path operation of the plane through them. The plane follows the guest's links (the
// service's contract) but does so with the guest's authority, so nothing may change on the host:
// victims are files in this test's own temporary directory, whose content, mode and owner are
// checked after every operation, and no answer may carry a host byte. Every case first runs the
// same operations on an ordinary guest path and expects them to work.
//
// Also here: the bearer token on /metrics and its comparison (issue 17, item 7).
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <functional>

#include "../../emulator/emulator_fixture.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kHostSecret = "host secret: never in an answer";

struct FileState {
    std::string content;
    mode_t mode = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    bool operator==(const FileState&) const = default;
};

FileState state_of(const fs::path& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    FileState out{{}, st.st_mode, st.st_uid, st.st_gid};
    if (S_ISREG(st.st_mode)) {
        std::ifstream in(path, std::ios::binary);
        out.content.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
}

// One answer of the plane: the status and the body.
struct Answer {
    int status;
    std::string body;
};

class FilePlaneLinks : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new TempDir();
        process_ = new EmulatorProcess(dir_->path() / "state", {"--token", "test-token"});
        boost::asio::io_context io;
        SdkClient sdk(io, process_->ca_file(), process_->base_url());
        id_ = new std::string(sdk.create());
        sdk.wait_for_state(*id_, "Running");
    }
    static void TearDownTestSuite() {
        {
            boost::asio::io_context io;
            SdkClient(io, process_->ca_file(), process_->base_url()).delete_all();
        }
        delete id_;
        delete process_;
        delete dir_;
    }

    void SetUp() override {
        sdk = std::make_unique<SdkClient>(io, process_->ca_file(), process_->base_url());
        // The host's victims: a directory, a file in it, a directory in it; modes no operation
        // of the plane would give them.
        host = dir_->path() /
               ("host-" +
                std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
        fs::create_directories(host / "sub");
        std::ofstream(host / "victim.txt") << kHostSecret;
        ::chmod(host.c_str(), 0700);
        ::chmod((host / "sub").c_str(), 0711);
        ::chmod((host / "victim.txt").c_str(), 0600);
        before = victims();
    }

    std::map<std::string, FileState> victims() const {
        return {{"dir", state_of(host)},
                {"sub", state_of(host / "sub")},
                {"file", state_of(host / "victim.txt")}};
    }

    // The host's victims are as they were; nothing new appeared next to them.
    void expect_host_untouched(const std::string& during) const {
        EXPECT_EQ(victims(), before) << "a host victim changed during " << during;
        std::size_t entries = 0;
        for ([[maybe_unused]] const auto& e : fs::directory_iterator(host)) {
            ++entries;
        }
        EXPECT_EQ(entries, 2u) << "something was created in the host directory during " << during;
    }

    void guest(const std::string& command) {
        const auto r = sdk->exec(*id_, command);
        ASSERT_EQ(r.at("exitCode").as_int64(), 0) << command << ": " << r.at("stderr").as_string();
    }

    Answer files(const std::string& method, const std::string& op, const std::string& path,
                 const std::string& extra = {}, std::string body = {}) {
        const auto r = sdk->call(method, "/sandboxes/" + *id_ + "/files" + op, std::move(body),
                                 "path=" + path + extra, "application/octet-stream");
        return Answer{r.status, r.body};
    }

    Answer mkdir(const std::string& path) {
        const auto r = sdk->call("POST", "/sandboxes/" + *id_ + "/files/mkdir",
                                 json::serialize(json::object{{"path", path}}));
        return Answer{r.status, r.body};
    }

    // Every host-side path operation of the plane on `base` (a directory-like path) and
    // `base/name`, each followed by the host check. Returns the answers by operation.
    std::map<std::string, Answer> every_operation(const std::string& base,
                                                  const std::string& name = "victim.txt") {
        std::map<std::string, Answer> out;
        const std::string file = base + "/" + name;
        const auto step = [&](const std::string& what, Answer answer) {
            EXPECT_EQ(answer.body.find("host secret"), std::string::npos)
                << what << " returned a host byte";
            EXPECT_LT(answer.status, 500) << what << ": " << answer.body;
            expect_host_untouched(what + " " + file);
            out.emplace(what, std::move(answer));
        };
        step("write+createDirs+mode", files("PUT", "", file, "&createDirs=true&mode=0777", "w1"));
        step("write", files("PUT", "", file, "&createDirs=false", "w2"));
        step("write into new dir",
             files("PUT", "", base + "/made/deeper.txt", "&createDirs=true&mode=4755", "w3"));
        step("mkdir", mkdir(base + "/newdir"));
        step("mkdir base", mkdir(base));
        step("mkdir file", mkdir(file));
        step("read", files("GET", "", file));
        step("stat", files("GET", "/stat", file));
        step("stat base", files("GET", "/stat", base));
        step("list", files("GET", "/list", base));
        step("delete", files("DELETE", "", file));
        step("delete recursive", files("DELETE", "", base + "/sub", "&recursive=true"));
        return out;
    }

    static TempDir* dir_;
    static EmulatorProcess* process_;
    static std::string* id_;
    boost::asio::io_context io;
    std::unique_ptr<SdkClient> sdk;
    fs::path host;
    std::map<std::string, FileState> before;
};
TempDir* FilePlaneLinks::dir_ = nullptr;
EmulatorProcess* FilePlaneLinks::process_ = nullptr;
std::string* FilePlaneLinks::id_ = nullptr;

// The control: on an ordinary guest directory every operation does what the service does.
void expect_benign_answers(const std::map<std::string, Answer>& a) {
    EXPECT_EQ(a.at("write+createDirs+mode").status, 200);
    EXPECT_EQ(a.at("write").status, 200);
    EXPECT_EQ(a.at("write into new dir").status, 200);
    EXPECT_EQ(a.at("mkdir").status, 200);
    EXPECT_EQ(a.at("read").status, 200);
    EXPECT_EQ(a.at("read").body, "w2");
    EXPECT_EQ(a.at("stat").status, 200);
    EXPECT_EQ(a.at("list").status, 200);
    EXPECT_EQ(a.at("delete").status, 204);
    EXPECT_EQ(a.at("delete recursive").status, 204);
}

TEST_F(FilePlaneLinks, AnAbsoluteLinkToAHostPathReachesOnlyTheGuestsFiles) {
    guest("mkdir -p /tmp/benign-abs/sub && touch /tmp/benign-abs/sub/f");
    expect_benign_answers(every_operation("/tmp/benign-abs"));

    // The link's text names the host's victims; the guest has no such path.
    guest(fmt::format("ln -s {} /tmp/abs && ln -s {}/victim.txt /tmp/absfile", host.string(),
                      host.string()));
    every_operation("/tmp/abs");
    // A link straight to the host file: mkdir and a write with a mode through it.
    const auto made = mkdir("/tmp/absfile");
    EXPECT_NE(made.status, 200);
    expect_host_untouched("mkdir through a link to a host file");
    files("PUT", "", "/tmp/absfile", "&mode=0777", "x");
    expect_host_untouched("write through a link to a host file");
    EXPECT_EQ(files("GET", "", "/tmp/absfile").body.find("host secret"), std::string::npos);
    // Even where the guest happens to have the same path, it is the guest's file that changes.
    guest(fmt::format("mkdir -p {} && echo guest > {}/victim.txt", host.string(), host.string()));
    EXPECT_EQ(files("GET", "", "/tmp/absfile").body, "guest\n");
    EXPECT_EQ(files("PUT", "", "/tmp/absfile", "&mode=0777", "through the link").status, 200);
    EXPECT_EQ(files("GET", "", host.string() + "/victim.txt").body, "through the link");
    expect_host_untouched("write through a link the guest resolves");
}

TEST_F(FilePlaneLinks, ARelativeLinkClimbingOutOfTheRootStaysInTheGuest) {
    guest("mkdir -p /tmp/benign-rel/sub && touch /tmp/benign-rel/sub/f");
    expect_benign_answers(every_operation("/tmp/benign-rel"));

    std::string climb;
    for (int i = 0; i < 24; ++i) {
        climb += "../";
    }
    guest(
        fmt::format("mkdir -p /tmp/a/b && ln -s {}{} /tmp/a/b/rel && ln -s "
                    "{}{}/victim.txt /tmp/a/b/relfile",
                    climb, host.relative_path().string(), climb, host.relative_path().string()));
    every_operation("/tmp/a/b/rel");
    EXPECT_NE(mkdir("/tmp/a/b/relfile").status, 200);
    files("PUT", "", "/tmp/a/b/relfile", "&mode=0777", "x");
    expect_host_untouched("write through a climbing link to a host file");
}

TEST_F(FilePlaneLinks, LinksIntoProcAreRefusedAndNeverReadAsTheHost) {
    guest("mkdir -p /tmp/benign-proc/sub && touch /tmp/benign-proc/sub/f");
    expect_benign_answers(every_operation("/tmp/benign-proc"));

    char hostname[256] = {};
    ASSERT_EQ(::gethostname(hostname, sizeof hostname - 1), 0);
    guest(
        "ln -s /proc/kallsyms /tmp/kallsyms && ln -s /proc/sys/kernel /tmp/kernel && "
        "ln -s /proc /tmp/procdir && ln -s /proc/sys/kernel/hostname /tmp/hostname");
    for (const auto& path : {std::string("/tmp/kallsyms"), std::string("/proc/kallsyms"),
                             std::string("/tmp/procdir/kallsyms")}) {
        const auto read = files("GET", "", path);
        EXPECT_EQ(read.status, 400) << path << ": " << read.body.substr(0, 200);
        EXPECT_EQ(read.body.find(" T "), std::string::npos) << "kernel symbols in the answer";
    }
    const auto written = files("PUT", "", "/tmp/hostname", "", "pwned-by-file-plane");
    EXPECT_EQ(written.status, 400) << written.body;
    EXPECT_EQ(files("PUT", "", "/tmp/kernel/hostname", "", "pwned-by-file-plane").status, 400);
    char after[256] = {};
    ASSERT_EQ(::gethostname(after, sizeof after - 1), 0);
    EXPECT_STREQ(after, hostname) << "a write through a guest link changed the host's hostname";
    if (std::string(after) != hostname) {
        ::sethostname(hostname, std::strlen(hostname));  // restore the host setting
    }
    for (const auto& [op, answer] : every_operation("/tmp/kernel", "hostname")) {
        // stat describes one entry as the guest's root sees it (the guest's own /proc, never
        // the host's), reading and writing nothing: the one operation kernel paths answer.
        if (op != "stat base" && op != "stat") {
            EXPECT_EQ(answer.status, 400) << op << ": " << answer.body.substr(0, 200);
        }
    }
    EXPECT_EQ(files("GET", "/list", "/tmp/procdir").status, 400);
    // stat describes an entry as the guest sees it (a link is not followed): allowed.
    const auto self = files("GET", "/stat", "/tmp/procdir/self");
    EXPECT_EQ(self.status, 200) << self.body;
    EXPECT_NE(self.body.find("\"isSymlink\":true"), std::string::npos) << self.body;
}

TEST_F(FilePlaneLinks, LinksIntoSysAndDevAreRefused) {
    guest("mkdir -p /tmp/benign-sys/sub && touch /tmp/benign-sys/sub/f");
    expect_benign_answers(every_operation("/tmp/benign-sys"));

    guest(
        "ln -s /sys/kernel /tmp/syskernel && ln -s /sys /tmp/sysdir && ln -s /dev/zero "
        "/tmp/zero && ln -s /dev /tmp/devdir");
    // The runtime mounts no sysfs in a sandbox today; if one is ever mounted, the plane refuses it.
    const auto type = sdk->exec(*id_, "stat -f -c %T /sys 2>/dev/null || echo none");
    const bool sysfs = type.at("stdout").as_string() == "sysfs\n";
    for (const auto& [op, answer] : every_operation("/tmp/syskernel", "uevent_seqnum")) {
        if (sysfs && op != "stat base" && op != "stat") {
            EXPECT_EQ(answer.status, 400) << op << ": " << answer.body.substr(0, 200);
        }
    }
    const auto read = files("GET", "", "/tmp/syskernel/uevent_seqnum");
    EXPECT_NE(read.status, 200) << "a host sysfs file was read: " << read.body.substr(0, 100);
    if (sysfs) {
        EXPECT_EQ(files("GET", "/list", "/tmp/sysdir").status, 400);
        EXPECT_EQ(files("DELETE", "", "/sys", "&recursive=true").status, 400);
    }
    EXPECT_EQ(files("GET", "", "/tmp/zero").status, 400);
    EXPECT_EQ(files("PUT", "", "/dev/null", "", "x").status, 400);
    EXPECT_EQ(files("GET", "/list", "/tmp/devdir").status, 400);
    EXPECT_EQ(files("DELETE", "", "/tmp/devdir/null").status, 400);
    EXPECT_EQ(files("DELETE", "", "/dev", "&recursive=true").status, 400);
}

TEST_F(FilePlaneLinks, ADanglingLinkNeverCreatesAnythingOnTheHost) {
    guest("mkdir -p /tmp/benign-dang/sub && touch /tmp/benign-dang/sub/f");
    expect_benign_answers(every_operation("/tmp/benign-dang"));

    const auto never = host / "never";
    guest(fmt::format("ln -s {} /tmp/dangling && ln -s {}/file /tmp/danglingfile", never.string(),
                      never.string()));
    every_operation("/tmp/dangling");
    files("PUT", "", "/tmp/danglingfile", "&createDirs=true&mode=0777", "x");
    mkdir("/tmp/danglingfile");
    EXPECT_FALSE(fs::exists(never)) << "a dangling guest link created a host path";
    expect_host_untouched("operations through a dangling link");
}

// The guest swaps a directory and a link (to the host's victims, or into /proc) with
// RENAME_EXCHANGE as fast as it can while the client works on the directory's name.
TEST_F(FilePlaneLinks, ALinkSwappedInDuringTheCallGainsNothing) {
    guest("mkdir -p /tmp/benign-swap/sub && touch /tmp/benign-swap/sub/f");
    expect_benign_answers(every_operation("/tmp/benign-swap"));

    std::ifstream probe_file(MAF_SECURITY_PROBE, std::ios::binary);
    const std::string probe((std::istreambuf_iterator<char>(probe_file)),
                            std::istreambuf_iterator<char>());
    ASSERT_FALSE(probe.empty());
    ASSERT_EQ(files("PUT", "", "/tmp/probe", "&mode=0755", probe).status, 200);
    for (const auto& target : {host.string(), std::string("/proc/sys/kernel")}) {
        guest(
            fmt::format("rm -rf /tmp/sw && mkdir -p /tmp/sw/d/sub && echo guest > "
                        "/tmp/sw/d/victim.txt && echo guest > /tmp/sw/d/hostname && "
                        "ln -s {} /tmp/sw/l",
                        target));
        guest("/tmp/probe swap /tmp/sw/d /tmp/sw/l 20 >/dev/null 2>&1 & echo $! > /tmp/swap.pid");
        const auto until = std::chrono::steady_clock::now() + 8s;
        int rounds = 0;
        while (std::chrono::steady_clock::now() < until) {
            for (const auto& [op, answer] : every_operation("/tmp/sw/d")) {
                EXPECT_EQ(answer.body.find(" T "), std::string::npos) << op;
            }
            const auto read = files("GET", "", "/tmp/sw/d/hostname");
            EXPECT_TRUE(read.status != 200 || read.body == "guest\n") << read.body;
            guest(
                "mkdir -p /tmp/sw/d/sub /tmp/sw/l/sub 2>/dev/null; echo guest > "
                "/tmp/sw/d/victim.txt 2>/dev/null; true");
            ++rounds;
        }
        guest("kill $(cat /tmp/swap.pid); true");
        EXPECT_GT(rounds, 0);
        expect_host_untouched("the swap race against " + target);
    }
}

// --- The bearer token on /metrics -----------------------------------------------------------

HttpResponse get_metrics(EmulatorProcess& process, std::optional<std::string> authorization) {
    boost::asio::io_context io;
    SdkClient sdk(io, process.ca_file(), process.base_url());
    HttpRequest request;
    request.method = "GET";
    request.target = process.base_url() + "/metrics";
    if (authorization) {
        request.headers.set("Authorization", *authorization);
    }
    return run_blocking(io, sdk.client().send(std::move(request)));
}

TEST(EmulatorToken, MetricsNeedTheTokenAndOnlyTheExactTokenPasses) {
    TempDir dir;
    EmulatorProcess process(dir.path(), {"--token", "the-right-token-0123456789"});
    // The control first: the right token is accepted.
    EXPECT_EQ(get_metrics(process, "Bearer the-right-token-0123456789").status, 200);
    EXPECT_EQ(get_metrics(process, std::nullopt).status, 401);
    for (const auto* wrong :
         {"Bearer the-right-token-0123456788", "Bearer the-right-token-012345678",
          "Bearer the-right-token-01234567890", "Bearer x", "Bearer ",
          "Basic the-right-token-0123456789", "the-right-token-0123456789"}) {
        const auto r = get_metrics(process, std::string(wrong));
        EXPECT_EQ(r.status, 401) << wrong;
        EXPECT_EQ(r.body.find("acas_emulator_requests_total"), std::string::npos) << wrong;
    }
    // The data plane refuses the same wrong tokens and takes the right one.
    boost::asio::io_context io;
    SdkClient right(io, process.ca_file(), process.base_url(), "the-right-token-0123456789");
    EXPECT_EQ(right.call("GET", "/sandboxes").status, 200);
    SdkClient wrong(io, process.ca_file(), process.base_url(), "the-right-token-0123456788");
    EXPECT_EQ(wrong.call("GET", "/sandboxes").status, 401);
}

TEST(EmulatorToken, PublicMetricsMakesOnlyMetricsPublic) {
    TempDir dir;
    EmulatorProcess process(dir.path(), {"--token", "tok", "--public-metrics"});
    EXPECT_EQ(get_metrics(process, std::nullopt).status, 200);
    boost::asio::io_context io;
    SdkClient wrong(io, process.ca_file(), process.base_url(), "not-tok");
    EXPECT_EQ(wrong.call("GET", "/sandboxes").status, 401);
}

// Started without --token, the emulator is not open to every user of the host (a loopback port
// is reachable by all of them): it generates a token, readable only by its owner, and refuses
// every other. --no-token is the explicit opt-out.
TEST(EmulatorToken, WithoutATokenOneIsGeneratedForTheOwnerAndEveryOtherIsRefused) {
    TempDir dir;
    emulator::EmulatorProcess process(emulator::EmulatorLaunch{ACAS_EMULATOR_PATH,
                                                               dir.path(),
                                                               {"--self-signed"},
                                                               dir.path() / "emulator.log",
                                                               std::chrono::seconds(30)});
    const auto file = dir.path() / "token";
    struct stat st {};
    ASSERT_EQ(::lstat(file.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    std::string token;
    std::ifstream(file) >> token;
    EXPECT_EQ(token.size(), 64u);
    boost::asio::io_context io;
    SdkClient owner(io, process.ca_file(), process.base_url(), token);
    EXPECT_EQ(owner.call("GET", "/sandboxes").status, 200);
    SdkClient other(io, process.ca_file(), process.base_url(), "any-token-at-all");
    EXPECT_EQ(other.call("GET", "/sandboxes").status, 401);
}

TEST(EmulatorToken, NoTokenIsTheExplicitOptOutAndWritesNoTokenFile) {
    TempDir dir;
    emulator::EmulatorProcess process(emulator::EmulatorLaunch{ACAS_EMULATOR_PATH,
                                                               dir.path(),
                                                               {"--self-signed", "--no-token"},
                                                               dir.path() / "emulator.log",
                                                               std::chrono::seconds(30)});
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "token"));
    boost::asio::io_context io;
    SdkClient anyone(io, process.ca_file(), process.base_url(), "any-token-at-all");
    EXPECT_EQ(anyone.call("GET", "/sandboxes").status, 200);
}

// --- The emulator's state file: no client grows it without bound -----------------------------

TEST(EmulatorStateCaps, AnOversizedRecordIsRefusedAndNeverWritten) {
    TempDir dir;
    EmulatorProcess process(dir.path(), {"--token", "tok"});
    boost::asio::io_context io;
    SdkClient sdk(io, process.ca_file(), process.base_url(), "tok");
    // The control: an ordinary disk-image record is kept.
    auto r = sdk.call("PUT", "/diskimages",
                      R"({"image":{"base":"myacr.azurecr.io/small:1.0"},"labels":{"name":"s"}})");
    ASSERT_TRUE(r.status == 200 || r.status == 201) << r.body;
    const auto state = dir.path() / "emulator" / "state.json";
    const auto size_before = std::filesystem::file_size(state);
    // 300 KiB of labels (each value within the 63-character rule), then of environment.
    json::object labels;
    for (int i = 0; i < 6000; ++i) {
        labels[fmt::format("label-{:05}", i)] = std::string(50, 'x');
    }
    r = sdk.call(
        "PUT", "/diskimages",
        json::serialize(json::object{{"image", json::object{{"base", "myacr.azurecr.io/big:1.0"}}},
                                     {"labels", labels}}));
    EXPECT_EQ(r.status, 413) << r.body.substr(0, 300);
    json::object environment;
    for (int i = 0; i < 3000; ++i) {
        environment[fmt::format("VAR_{:05}", i)] = std::string(100, 'y');
    }
    r = sdk.call("PUT", "/sandboxes",
                 json::serialize(json::object{
                     {"sourcesRef", json::object{{"diskImage", json::object{{"name", "python-3.13"},
                                                                            {"isPublic", true}}}}},
                     {"environment", environment}}));
    EXPECT_EQ(r.status, 413) << r.body.substr(0, 300);
    EXPECT_LT(std::filesystem::file_size(state), size_before + 4096);
    const auto listing = SdkClient::body(sdk.call("GET", "/sandboxes")).at("value").as_array();
    EXPECT_TRUE(listing.empty());
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
