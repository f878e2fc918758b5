// The emulator's file plane must not let a guest size the emulator's memory (issue 17 item 4):
// the emulator's memory is charged to no sandbox, and the guest chooses how many names its
// directories hold and how large its files are. A listing past the caps is refused while the
// directory is read, reads are sent in pieces, and every request together holds at most the
// in-flight budget. The emulator here runs with small caps (10000 entries, 2 MiB per listing,
// a 64 MiB budget) so that a directory and files far past them stay cheap to make. Each bound is
// checked on the emulator's own peak resident set (VmHWM, reset before the phase measured), and
// every case first runs the benign control the caps must not disturb.
#include <fstream>
#include <thread>

#include "../../emulator/emulator_fixture.hpp"
#include "maf_sandbox/net/http.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;
constexpr std::uint64_t kListEntries = 10000;
constexpr std::uint64_t kListBytes = 2 * kMiB;

// A kB field of /proc/<pid>/status, in bytes.
std::uint64_t status_bytes(pid_t pid, const std::string& field) {
    std::ifstream in(fmt::format("/proc/{}/status", pid));
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(field + ":", 0) == 0) {
            return std::stoull(line.substr(field.size() + 1)) * 1024;
        }
    }
    ADD_FAILURE() << "no " << field << " in /proc/" << pid << "/status";
    return 0;
}

// Resets the process's peak resident set to its current one (proc(5), clear_refs "5").
void reset_peak(pid_t pid) {
    std::ofstream(fmt::format("/proc/{}/clear_refs", pid)) << "5";
}

// The bytes the guest writes with the same formula: 4 KiB blocks of 0..255 shifted by the
// block's index, so every byte value (NUL included) appears and no two blocks in a row match.
std::string pattern(std::uint64_t size) {
    std::string out(size, '\0');
    for (std::uint64_t i = 0; i < size; ++i) {
        out[i] = static_cast<char>(((i % 256) + i / 4096) & 255);
    }
    return out;
}

std::string guest_pattern_command(const std::string& path, std::uint64_t size) {
    return fmt::format(
        "python3 -c \"import sys; n={}; "
        "sys.stdout.buffer.write(b''.join(bytes(((x + j) & 255) for x in range(256)) * 16 "
        "for j in range(n // 4096)))\" > {}",
        size, path);
}

struct Answer {
    int status;
    std::string body;
};

class FilePlaneMemory : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new TempDir();
        process_ = new EmulatorProcess(
            dir_->path() / "state",
            {"--token", "test-token", "--max-list-entries", std::to_string(kListEntries),
             "--max-list-bytes", std::to_string(kListBytes), "--file-budget-bytes",
             std::to_string(64 * kMiB)});
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
    }

    void guest(const std::string& command) {
        const auto r = sdk->exec(*id_, command);
        ASSERT_EQ(r.at("exitCode").as_int64(), 0) << command << ": " << r.at("stderr").as_string();
    }

    // One call on its own connection (for calls made in parallel).
    static Answer call(const std::string& op, const std::string& path) {
        boost::asio::io_context io;
        SdkClient client(io, process_->ca_file(), process_->base_url());
        const auto r = client.call("GET", "/sandboxes/" + *id_ + "/files" + op, {},
                                   "path=" + net::percent_encode(path, true));
        return Answer{r.status, r.body};
    }

    // `count` copies of `op` on `path` at once.
    static std::vector<Answer> in_parallel(int count, const std::string& op,
                                           const std::string& path) {
        std::vector<Answer> answers(static_cast<std::size_t>(count));
        std::vector<std::thread> threads;
        for (int i = 0; i < count; ++i) {
            threads.emplace_back(
                [&answers, i, op, path] { answers[static_cast<std::size_t>(i)] = call(op, path); });
        }
        for (auto& t : threads) {
            t.join();
        }
        return answers;
    }

    pid_t pid() const { return process_->pid(); }

    static TempDir* dir_;
    static EmulatorProcess* process_;
    static std::string* id_;
    boost::asio::io_context io;
    std::unique_ptr<SdkClient> sdk;
};

TempDir* FilePlaneMemory::dir_ = nullptr;
EmulatorProcess* FilePlaneMemory::process_ = nullptr;
std::string* FilePlaneMemory::id_ = nullptr;

TEST_F(FilePlaneMemory, ANormalListingAnswersEveryEntrySorted) {
    guest("mkdir -p /tmp/small && cd /tmp/small && for i in $(seq 100 149); do : > f$i; done");
    const auto r = call("/list", "/tmp/small");
    ASSERT_EQ(r.status, 200) << r.body;
    const auto listing = json::parse(r.body).as_object();
    EXPECT_EQ(listing.at("path").as_string(), "/tmp/small");
    const auto& entries = listing.at("entries").as_array();
    ASSERT_EQ(entries.size(), 50u);
    EXPECT_EQ(entries[0].at("name").as_string(), "f100");
    EXPECT_EQ(entries[49].at("path").as_string(), "/tmp/small/f149");
    EXPECT_EQ(entries[0].at("isDir").as_bool(), false);
}

TEST_F(FilePlaneMemory, AListingPastTheEntryCapIsRefusedNamingTheCapAndTheFix) {
    // Exactly at the cap: answered in full.
    guest(fmt::format("mkdir -p /tmp/at && cd /tmp/at && seq 1 {} | xargs touch", kListEntries));
    const auto at = call("/list", "/tmp/at");
    ASSERT_EQ(at.status, 200) << at.body.substr(0, 300);
    EXPECT_EQ(json::parse(at.body).at("entries").as_array().size(), kListEntries);

    guest(fmt::format("mkdir -p /tmp/past && cd /tmp/past && seq 1 {} | xargs touch",
                      kListEntries + 1));
    const auto past = call("/list", "/tmp/past");
    ASSERT_EQ(past.status, 413) << past.body.substr(0, 300);
    const auto problem = json::parse(past.body).as_object();
    EXPECT_EQ(problem.at("title").as_string(), "ListingTooLarge");
    const std::string detail(problem.at("detail").as_string());
    EXPECT_NE(detail.find(fmt::format("{} entries", kListEntries)), std::string::npos) << detail;
    EXPECT_NE(detail.find("list a subdirectory"), std::string::npos) << detail;
    EXPECT_NE(detail.find("--max-list-entries"), std::string::npos) << detail;
}

// The attacker's directory: names as long as a file system allows, far more of them than the
// byte cap admits. Uncapped, one answer for it is about 16 MB of JSON built as a DOM of about
// twice that, so six at once would take the emulator up by well over 100 MiB. Capped, a refused
// listing holds at most the cap's worth of names (2 MiB) while it reads them, and the six
// together at most 12 MiB plus their strings' overhead; 48 MiB leaves room for the worker
// threads' and TLS sessions' own pages and still fails an uncapped listing.
TEST_F(FilePlaneMemory, ParallelListingsOfAHugeDirectoryKeepTheEmulatorsMemoryBounded) {
    guest(
        "mkdir -p /tmp/huge && cd /tmp/huge && python3 -c \"import os\n"
        "for i in range(30000): open('%05d' % i + 'n' * 245, 'w').close()\"");
    const auto before = status_bytes(pid(), "VmRSS");
    reset_peak(pid());
    const auto answers = in_parallel(6, "/list", "/tmp/huge");
    const auto peak = status_bytes(pid(), "VmHWM");
    for (const auto& a : answers) {
        ASSERT_EQ(a.status, 413) << a.body.substr(0, 300);
        EXPECT_EQ(json::parse(a.body).at("title").as_string(), "ListingTooLarge");
        EXPECT_NE(a.body.find(fmt::format("{} bytes", kListBytes)), std::string::npos) << a.body;
    }
    RecordProperty("peak_growth_bytes", std::to_string(peak - std::min(peak, before)));
    EXPECT_LT(peak, before + 48 * kMiB) << "emulator peak RSS " << peak << " from " << before;
    // The directory's subdirectories stay listable: the fix the refusal names.
    guest("mkdir -p /tmp/huge/sub && : > /tmp/huge/sub/one");
    const auto sub = call("/list", "/tmp/huge/sub");
    ASSERT_EQ(sub.status, 200) << sub.body;
    EXPECT_EQ(json::parse(sub.body).at("entries").as_array().size(), 1u);
}

TEST_F(FilePlaneMemory, AThirtyTwoMebibyteReadWithNulBytesIsByteExact) {
    constexpr std::uint64_t size = 32 * kMiB;
    guest(guest_pattern_command("/tmp/blob32", size));
    const auto r = call("", "/tmp/blob32");
    ASSERT_EQ(r.status, 200) << r.body.substr(0, 300);
    ASSERT_EQ(r.body.size(), size);
    EXPECT_TRUE(r.body == pattern(size)) << "the 32 MiB read differs from what the guest wrote";
    // A file that is not a whole number of pieces, and an empty one.
    guest("head -c 1048577 /tmp/blob32 > /tmp/odd && : > /tmp/empty");
    const auto odd = call("", "/tmp/odd");
    ASSERT_EQ(odd.status, 200);
    EXPECT_TRUE(odd.body == pattern(size).substr(0, 1048577));
    const auto empty = call("", "/tmp/empty");
    ASSERT_EQ(empty.status, 200);
    EXPECT_TRUE(empty.body.empty());
}

// Four reads of a 48 MiB file at once: buffered whole, they would add at least 4 x 48 MiB to the
// emulator. Streamed, each holds one 1 MiB piece (and the TLS layer its records), so 32 MiB is a
// generous bound that a buffered read would still break six times over.
TEST_F(FilePlaneMemory, ParallelLargeReadsKeepTheEmulatorsMemoryBounded) {
    constexpr std::uint64_t size = 48 * kMiB;
    guest(guest_pattern_command("/tmp/blob48", size));
    const auto before = status_bytes(pid(), "VmRSS");
    reset_peak(pid());
    auto answers = in_parallel(4, "", "/tmp/blob48");
    const auto peak = status_bytes(pid(), "VmHWM");
    RecordProperty("peak_growth_bytes", std::to_string(peak - std::min(peak, before)));
    EXPECT_LT(peak, before + 32 * kMiB) << "emulator peak RSS " << peak << " from " << before;
    const auto expected = pattern(size);
    for (auto& a : answers) {
        ASSERT_EQ(a.status, 200) << a.body.substr(0, 300);
        EXPECT_TRUE(a.body == expected) << "a parallel read differs from what the guest wrote";
        a.body.clear();
        a.body.shrink_to_fit();
    }
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
