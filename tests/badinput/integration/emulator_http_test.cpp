// acas-emulator fed malformed, wrongly typed, wrongly labelled and oversized requests, and raw
// HTTP garbage: every answer is a 4xx (problem+json where the emulator answers, the HTTP layer's
// 400/413/431 otherwise), nothing crashes or hangs, and the emulator keeps serving. File paths
// with NUL, invalid UTF-8 and traversal never reach a host file outside the sandbox.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "emulator_process.hpp"
#include "maf_sandbox/net/http_client.hpp"
#include "path_battery.hpp"

namespace maf_sandbox::badinput {
namespace {

namespace json = boost::json;

const std::string kGroup = "/subscriptions/s/resourceGroups/rg/sandboxGroups/badinput";
const std::string kApi = "api-version=2026-02-01-preview";

const std::string kCreateBody =
    R"({"sourcesRef":{"diskImage":{"name":"python-3.13","isPublic":true}},)"
    R"("resources":{"cpu":"1000m","memory":"2048Mi"},"labels":{"scope":"badinput"},)"
    R"("egressPolicy":{"defaultAction":"Deny","trafficInspection":"Full"}})";

// One emulator and one running sandbox for the whole suite (started once: sandboxes are slow).
class EmulatorBadInput : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        state_ = new TempDir();
        created_ = new std::vector<std::string>();
        emulator_ = new EmulatorProcess(state_->path() / "state");
        io_ = new boost::asio::io_context();
        net::HttpClientOptions options;
        options.proxy = net::ProxySettings{};
        client_ = new net::HttpClient(io_->get_executor(), options);
        const auto created = call("PUT", "/sandboxes", kCreateBody);
        ASSERT_TRUE(created.status == 200 || created.status == 201) << created.body;
        sandbox_ = new std::string(json::parse(created.body).at("id").as_string());
        for (int i = 0; i < 300; ++i) {
            const auto r = call("GET", "/sandboxes/" + *sandbox_);
            if (r.status == 200 && json::parse(r.body).at("state").as_string() == "Running") {
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        FAIL() << "the suite's sandbox never reached Running";
    }
    static void TearDownTestSuite() {
        // Every sandbox the suite made, and every one the group lists: a bad request the emulator
        // wrongly accepts may have created one, or poisoned the listing (then the ids recorded at
        // create time still reach them). Sandboxes outlive the emulator, so wait (bounded) until
        // each is gone.
        std::set<std::string> ids(created_->begin(), created_->end());
        for (int round = 0; round < 100; ++round) {
            const auto r = call("GET", "/sandboxes");
            boost::system::error_code ec;
            const auto listing = json::parse(r.body, ec);
            if (r.status == 200 && !ec && listing.is_object() && listing.at("value").is_array()) {
                for (const auto& sandbox : listing.at("value").as_array()) {
                    ids.insert(std::string(sandbox.at("id").as_string()));
                }
            }
            std::erase_if(ids, [](const std::string& id) {
                return call("GET", "/sandboxes/" + id).status == 404;
            });
            if (ids.empty()) {
                break;
            }
            for (const auto& id : ids) {
                call("DELETE", "/sandboxes/" + id);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        EXPECT_TRUE(ids.empty()) << "sandboxes left behind: " << ids.size();
        delete created_;
        delete sandbox_;
        delete client_;
        delete io_;
        delete emulator_;
        delete state_;
        sandbox_ = nullptr;
    }

    static net::HttpResponse send(net::HttpRequest request) {
        return drive(*io_, client_->send(std::move(request)));
    }
    static net::HttpResponse call(const std::string& method, const std::string& path,
                                  std::string body = {},
                                  const std::string& content_type = "application/json",
                                  const std::string& query = {}) {
        net::HttpRequest request;
        request.method = method;
        request.target =
            emulator_->base_url() + kGroup + path + "?" + kApi + (query.empty() ? "" : "&" + query);
        request.headers.set("Authorization", "Bearer badinput-token");
        if (!content_type.empty()) {
            request.headers.set("Content-Type", content_type);
        }
        request.body = std::move(body);
        auto response = send(std::move(request));
        if (method == "PUT" && path == "/sandboxes" && response.status / 100 == 2) {
            boost::system::error_code ec;
            const auto created = json::parse(response.body, ec);
            if (!ec && created.is_object() && created.as_object().contains("id")) {
                created_->push_back(std::string(created.at("id").as_string()));
            }
        }
        return response;
    }

    // A 4xx whose body is a JSON object (problem+json or an ACAS error shape).
    static void expect_json_4xx(const net::HttpResponse& r, const std::string& what) {
        EXPECT_GE(r.status, 400) << what << ": " << r.body.substr(0, 300);
        EXPECT_LT(r.status, 500) << what << ": " << r.body.substr(0, 300);
        boost::system::error_code ec;
        const auto value = json::parse(r.body, ec);
        EXPECT_TRUE(!ec && value.is_object())
            << what << ": not a JSON error: " << r.body.substr(0, 300);
        EXPECT_LT(r.body.size(), 4096u) << what << ": the error echoes the request";
    }

    static void expect_still_serving() {
        ASSERT_TRUE(emulator_->alive()) << "the emulator exited";
        net::HttpRequest request;
        request.target = emulator_->base_url() + "/healthz";
        EXPECT_EQ(send(std::move(request)).status, 200);
        const auto r = call("GET", "/sandboxes/" + *sandbox_);
        EXPECT_EQ(r.status, 200) << r.body;
    }

    static inline TempDir* state_ = nullptr;
    static inline EmulatorProcess* emulator_ = nullptr;
    static inline boost::asio::io_context* io_ = nullptr;
    static inline net::HttpClient* client_ = nullptr;
    static inline std::string* sandbox_ = nullptr;
    static inline std::vector<std::string>* created_ = nullptr;
};

std::vector<std::pair<std::string, std::string>> malformed_bodies() {
    using namespace std::string_literals;
    return {
        {"empty", ""},
        {"truncated", R"({"command":"ls")"},
        {"an array", "[]"},
        {"null", "null"},
        {"a string", R"("ls")"},
        {"a NUL", "{\"command\":\0\"ls\"}"s},
        {"invalid UTF-8", "{\"command\":\"l\xffs\"}"},
        {"deep nesting", std::string(100000, '[') + std::string(100000, ']')},
        {"form data", "command=ls&x=1"},
    };
}

// Raw bytes over TCP: what no HTTP client library would send.
std::string raw_exchange(std::uint16_t port, const std::string& bytes, bool half_close = true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return "socket failed";
    }
    timeval timeout{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string answer;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
        std::size_t sent = 0;
        while (sent < bytes.size()) {
            const auto n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
            if (n <= 0) {
                break;
            }
            sent += static_cast<std::size_t>(n);
        }
        if (half_close) {
            ::shutdown(fd, SHUT_WR);
        }
        char buffer[4096];
        for (;;) {
            const auto n = ::recv(fd, buffer, sizeof buffer, 0);
            if (n <= 0) {
                break;
            }
            answer.append(buffer, static_cast<std::size_t>(n));
        }
    }
    ::close(fd);
    return answer;
}

TEST_F(EmulatorBadInput, MalformedJsonBodiesToEveryBodyTakingEndpointAreJson4xx) {
    const std::string sandbox = "/sandboxes/" + *sandbox_;
    const std::vector<std::pair<std::string, std::string>> endpoints{
        {"PUT", "/sandboxes"},
        {"POST", sandbox + "/executeShellCommand"},
        {"POST", sandbox + "/lifecycle"},
        {"POST", sandbox + "/egresspolicy"},
        {"POST", sandbox + "/files/mkdir"},
        {"PUT", "/diskimages"},
    };
    for (const auto& [method, path] : endpoints) {
        for (const auto& [name, body] : malformed_bodies()) {
            expect_json_4xx(call(method, path, body), method + " " + path + " with " + name);
        }
    }
    expect_still_serving();
}

TEST_F(EmulatorBadInput, WrongTypedFieldsAreJson4xx) {
    const std::string sandbox = "/sandboxes/" + *sandbox_;
    const std::vector<std::tuple<std::string, std::string, std::string>> cases{
        {"PUT", "/sandboxes", R"({"sourcesRef":7})"},
        {"PUT", "/sandboxes", R"({"sourcesRef":{"diskImage":{"name":["x"]}}})"},
        {"PUT", "/sandboxes", R"({"sourcesRef":{"diskImage":{"name":"no-such-image"}}})"},
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13","isPublic":true}},"labels":{"a":1}})"},
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13","isPublic":true}},"labels":[]})"},
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13","isPublic":true}},"labels":{"a":")" +
             std::string(1000, 'v') + R"("}})"},
        {"POST", sandbox + "/executeShellCommand", R"({"command":7})"},
        {"POST", sandbox + "/executeShellCommand", R"({"command":["ls"]})"},
        {"POST", sandbox + "/executeShellCommand", R"({"command":1e999999})"},
        {"POST", sandbox + "/executeShellCommand", R"({})"},
        {"POST", sandbox + "/egresspolicy", R"({"defaultAction":"Deny","hostRules":"all"})"},
        {"POST", sandbox + "/files/mkdir", R"({"path":7})"},
        {"POST", sandbox + "/files/mkdir", R"({"path":""})"},
    };
    for (const auto& [method, path, body] : cases) {
        expect_json_4xx(call(method, path, body), method + " " + path + " " + body.substr(0, 120));
    }
    expect_still_serving();
}

// The emulator stores lifecycle and egress-policy bodies and echoes them on every later GET and
// list: a field of the wrong type or an infinite number (1e999999, which would come back as
// `Infinity`) is refused naming the field, and the listing stays valid JSON.
TEST_F(EmulatorBadInput, PolicyAndWorkingDirectoryFieldsOfTheWrongTypeAreJson4xx) {
    const std::string sandbox = "/sandboxes/" + *sandbox_;
    const std::vector<std::tuple<std::string, std::string, std::string>> cases{
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13","isPublic":true}},"egressPolicy":"open"})"},
        {"POST", sandbox + "/executeShellCommand", R"({"command":"true","workingDirectory":7})"},
        {"POST", sandbox + "/lifecycle", R"({"autoSuspendPolicy":"never"})"},
        {"POST", sandbox + "/lifecycle", R"({"autoSuspendPolicy":{"interval":1e999999}})"},
        {"POST", sandbox + "/egresspolicy", R"({"defaultAction":7})"},
        {"POST", sandbox + "/egresspolicy", R"({"defaultAction":1e999999})"},
        {"POST", sandbox + "/egresspolicy", R"({"defaultAction":"Deny","x":[1e999999]})"},
        {"POST", sandbox + "/egresspolicy",
         R"({"defaultAction":"Deny","hostRules":[{"pattern":7}]})"},
        {"POST", sandbox + "/egresspolicy", R"({"defaultAction":"Deny","rules":["all"]})"},
        {"POST", sandbox + "/egresspolicy", R"({"trafficInspection":"Everything"})"},
        {"POST", sandbox + "/lifecycle", R"({"autoSuspendPolicy":{"interval":-1}})"},
        {"POST", sandbox + "/lifecycle", R"({"autoSuspendPolicy":{"enabled":"yes"}})"},
        {"POST", sandbox + "/lifecycle", R"({"autoDeletePolicy":{"deleteIntervalInSeconds":"9"}})"},
        {"POST", sandbox + "/lifecycle", R"({"autoSuspendPolicy":{"mode":"Tape"}})"},
        {"POST", sandbox + "/lifecycle", R"({"autoSuspendPolicy":[1e999999]})"},
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13"}},"lifecycle":{"x":1e999999}})"},
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13"}},"lifecycle":7})"},
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13"}},"environment":{"A":1}})"},
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13"}},"resources":{"cpu":"1e999"}})"},
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13"}},"resources":{"memory":"9e300Gi"}})"},
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13"}},"resources":"big"})"},
        {"PUT", "/sandboxes",
         R"({"sourcesRef":{"diskImage":{"name":"python-3.13","isPublic":"yes"}}})"},
        {"PUT", "/diskimages", R"({"image":{"base":7}})"},
        {"PUT", "/diskimages", R"({"image":"python"})"},
    };
    for (const auto& [method, path, body] : cases) {
        const auto r = call(method, path, body);
        expect_json_4xx(r, method + " " + path + " " + body.substr(0, 120));
        EXPECT_NE(r.body.find("'"), std::string::npos)
            << method << " " << path << ": the refusal names no field: " << r.body;
    }
    // Nothing poisoned the stored documents: the listing and the sandbox are still JSON.
    for (const auto& path : {std::string("/sandboxes"), sandbox}) {
        const auto r = call("GET", path);
        boost::system::error_code ec;
        json::parse(r.body, ec);
        EXPECT_EQ(r.status, 200) << path;
        EXPECT_FALSE(ec) << path << ": " << r.body.substr(0, 300);
    }
    // A well-typed policy is still taken and echoed.
    const auto lifecycle =
        call("POST", sandbox + "/lifecycle",
             R"({"autoSuspendPolicy":{"enabled":true,"interval":300,"mode":"Memory"}})");
    EXPECT_EQ(lifecycle.status, 200) << lifecycle.body;
    const auto egress = call("POST", sandbox + "/egresspolicy",
                             R"({"defaultAction":"Deny","trafficInspection":"Full"})");
    EXPECT_EQ(egress.status, 200) << egress.body;
}

TEST_F(EmulatorBadInput, WrongContentTypesWithNonJsonBodiesAreJson4xx) {
    for (const auto* type : {"text/plain", "application/x-www-form-urlencoded", "image/png", ""}) {
        expect_json_4xx(call("PUT", "/sandboxes", "name=python-3.13", type),
                        std::string("create as ") + type);
        expect_json_4xx(
            call("POST", "/sandboxes/" + *sandbox_ + "/executeShellCommand", "command=id", type),
            std::string("exec as ") + type);
    }
    expect_still_serving();
}

TEST_F(EmulatorBadInput, OversizedBodiesAreRefusedAndTheEmulatorKeepsServing) {
    // Over the HTTP layer's 64 MiB bound: 413 before any handler runs.
    // The server answers 413 as soon as the headers announce the size and closes; a client still
    // writing the body may see that as a broken pipe instead of reading the 413.
    try {
        const auto over = call("PUT", "/sandboxes", std::string((64u << 20) + 16, ' '));
        EXPECT_EQ(over.status, 413) << over.body.substr(0, 200);
    } catch (const net::NetError& e) {
        EXPECT_FALSE(e.request_sent()) << e.what();
    }
    // Under it, 32 MiB of JSON the handlers must refuse without echoing it.
    const std::string big(32u << 20, 'a');
    expect_json_4xx(call("POST", "/sandboxes/" + *sandbox_ + "/executeShellCommand",
                         R"({"command":7,"padding":")" + big + "\"}"),
                    "a 32 MiB exec body");
    expect_json_4xx(call("PUT", "/sandboxes", R"({"labels":{"x":")" + big + "\"}}"),
                    "a 32 MiB label");
    expect_still_serving();
}

TEST_F(EmulatorBadInput, BadRequestTargetsAreJson4xx) {
    for (const auto& path : std::vector<std::string>{
             "/sandboxes/a%00b", "/sandboxes/" + std::string(5000, 'i'), "/sandboxes/../../..",
             "/sandboxes/x/unknownOp", "/sandboxes/x/files/unknownOp", "/diskimages/%2e%2e"}) {
        expect_json_4xx(call("GET", path), "GET " + path.substr(0, 80));
        expect_json_4xx(call("POST", path, "{}"), "POST " + path.substr(0, 80));
    }
    expect_json_4xx(call("GET", "/sandboxes", {}, "application/json", "api-version=1999-01-01"),
                    "a second, unsupported api-version");
    // Bad percent-encoding, which no client library sends: straight over TCP.
    const auto answer =
        raw_exchange(emulator_->port(), "GET " + kGroup + "/sandboxes/%ZZ?" + kApi +
                                            " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                            "badinput-token\r\nConnection: close\r\n\r\n");
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << answer.substr(0, 200);
    const auto body = answer.substr(std::min(answer.size(), answer.find("\r\n\r\n") + 4));
    boost::system::error_code ec;
    EXPECT_TRUE(json::parse(body, ec).is_object() && !ec) << body.substr(0, 200);
    expect_still_serving();
}

TEST_F(EmulatorBadInput, RawHttpGarbageIsRefusedOrClosedNeverCrashesOrHangs) {
    using namespace std::string_literals;
    const auto port = emulator_->port();
    const std::vector<std::pair<std::string, std::string>> cases{
        {"not HTTP", "GARBAGE\r\n\r\n"},
        {"binary", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"s},
        {"NUL in the request line", "GET /he\0althz HTTP/1.1\r\nHost: x\r\n\r\n"s},
        {"a 100 KiB target",
         "GET /" + std::string(100 << 10, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n"},
        {"headers over the limit",
         "GET /healthz HTTP/1.1\r\nHost: x\r\nX: " + std::string(1 << 20, 'h') + "\r\n\r\n"},
        {"a negative Content-Length", "PUT " + kGroup + "/sandboxes?" + kApi +
                                          " HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}"},
        {"two Content-Lengths", "PUT " + kGroup + "/sandboxes?" + kApi +
                                    " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: "
                                    "9\r\n\r\n{}"},
        {"a Content-Length over the limit",
         "PUT " + kGroup + "/sandboxes?" + kApi +
             " HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n{}"},
        {"a body shorter than its Content-Length",
         "PUT " + kGroup + "/sandboxes?" + kApi +
             " HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\":"},
        {"a bad chunk size",
         "PUT " + kGroup + "/sandboxes?" + kApi +
             " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n{}"
             "\r\n0\r\n\r\n"},
        {"a chunk size that overflows",
         "PUT " + kGroup + "/sandboxes?" + kApi +
             " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFF\r\n{}"},
        {"HTTP/0.9", "GET /healthz\r\n\r\n"},
        {"an absolute-form target", "GET http://evil.example/healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
    };
    for (const auto& [name, bytes] : cases) {
        const auto started = std::chrono::steady_clock::now();
        const auto answer = raw_exchange(port, bytes);
        const auto took = std::chrono::steady_clock::now() - started;
        EXPECT_LT(took, std::chrono::seconds(5)) << name << ": the emulator held the connection";
        if (!answer.empty()) {
            EXPECT_TRUE(answer.starts_with("HTTP/1.1 4")) << name << ": " << answer.substr(0, 200);
        }
        ASSERT_TRUE(emulator_->alive()) << name << " killed the emulator";
    }
    expect_still_serving();
}

TEST_F(EmulatorBadInput, FilePathsWithNulInvalidUtf8OrTraversalNeverReachTheHost) {
    // A host file outside every sandbox, and a name no guest may create on the host.
    const auto host_dir = state_->path() / "host-only";
    std::filesystem::create_directories(host_dir);
    const auto sentinel = host_dir / "sentinel";
    std::ofstream(sentinel) << "host secret";
    const std::string host = host_dir.string();
    const std::string files = "/sandboxes/" + *sandbox_ + "/files";
    const std::vector<std::string> paths{
        "%00",
        "a%00b",
        "%FF%FE",
        "..%C0%AF..%C0%AFetc",
        "..%2F..%2F..%2F..%2F..%2F..%2F.." + host + "%2Fsentinel",
        host + "/sentinel",
        "/proc/self/root" + host + "/sentinel",
        "/proc/1/root" + host + "/sentinel",
        "/proc/self/cwd/sentinel",
        "/proc/self/fd/0",
    };
    for (const auto& path : paths) {
        for (const auto& op : {std::string(), std::string("/stat"), std::string("/list")}) {
            const auto r = call("GET", files + op, {}, "", "path=" + path);
            EXPECT_EQ(r.body.find("host secret"), std::string::npos) << op << " " << path;
            if (r.status >= 400) {
                expect_json_4xx(r, "GET files" + op + " " + path);
            }
        }
        const auto put = call("PUT", files, "planted", "application/octet-stream",
                              "path=" + path + "%2Fplanted&createDirs=true");
        const auto removed = call("DELETE", files, {}, "", "path=" + path + "&recursive=true");
        EXPECT_LT(put.status, 500) << path << ": " << put.body.substr(0, 200);
        EXPECT_LT(removed.status, 500) << path << ": " << removed.body.substr(0, 200);
    }
    std::ifstream in(sentinel);
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(content, "host secret");
    EXPECT_FALSE(std::filesystem::exists(host_dir / "planted"));
    EXPECT_FALSE(std::filesystem::exists(host_dir / "sentinel" / "planted"));
    expect_still_serving();
}

// Route labels come from routing.hpp's fixed table: no client can add label values to /metrics
// or inject lines into its text format, through the path or the method.
TEST_F(EmulatorBadInput, RequestTextNeverReachesTheMetrics) {
    call("GET", "/sandboxes/" + *sandbox_ + "/files/evil%22%7D%0Ainjected_metric%201");
    call("GET", "/sandboxes/no-such/files/another-unique-label");
    call("GET", "/nowhere/yet-another-unique-label");
    call("FROBNICATE", "/sandboxes");
    net::HttpRequest request;
    request.target = emulator_->base_url() + "/metrics";
    request.headers.set("Authorization", "Bearer badinput-token");
    const auto metrics = send(std::move(request));
    EXPECT_EQ(metrics.body.find("injected_metric"), std::string::npos) << metrics.body;
    EXPECT_EQ(metrics.body.find("another-unique-label"), std::string::npos);
    EXPECT_EQ(metrics.body.find("FROBNICATE"), std::string::npos);
    for (std::size_t start = 0; start < metrics.body.size();) {
        const auto end = metrics.body.find('\n', start);
        const auto line = metrics.body.substr(start, end - start);
        EXPECT_TRUE(line.starts_with("# ") || line.starts_with("acas_emulator_")) << line;
        start = end == std::string::npos ? metrics.body.size() : end + 1;
    }
}

// A path through a /proc magic link (ELOOP under RESOLVE_NO_MAGICLINKS) is a 400 InvalidPath, and
// a refusal quoting a non-UTF-8 path or image name is still valid JSON (U+FFFD for bad bytes).
// A relative path names an entry of the working directory, "/" (docs/emulator.md): a missing one
// is a JSON 404, and writing one creates that entry of "/" (an overlong-UTF-8 "slash" is part of
// the name, not a traversal).
TEST_F(EmulatorBadInput, MagicLinkAndNonUtf8PathsAreJson4xx) {
    const std::string files = "/sandboxes/" + *sandbox_ + "/files";
    for (const auto* path : {"/proc/1/root/etc/passwd", "%FF%FE", "..%C0%AF..%C0%AFetc"}) {
        const bool relative = path[0] != '/';
        for (const auto& op : {std::string(), std::string("/stat"), std::string("/list")}) {
            expect_json_4xx(call("GET", files + op, {}, "", std::string("path=") + path),
                            "GET " + op + path);
        }
        const auto put =
            call("PUT", files, "x", "application/octet-stream", std::string("path=") + path);
        if (relative) {
            EXPECT_EQ(put.status, 200) << path << ": " << put.body.substr(0, 200);
            // The entry of "/" so named holds the bytes.
            const auto absolute = call("GET", files, {}, "", std::string("path=%2F") + path);
            EXPECT_EQ(absolute.status, 200) << path << ": " << absolute.body.substr(0, 200);
            EXPECT_EQ(absolute.body, "x") << path;
            EXPECT_EQ(call("DELETE", files, {}, "", std::string("path=") + path).status / 100, 2)
                << path;
        } else {
            expect_json_4xx(put, std::string("PUT ") + path);
            expect_json_4xx(call("DELETE", files, {}, "", std::string("path=") + path),
                            std::string("DELETE ") + path);
        }
    }
    expect_json_4xx(call("GET", "/diskimages/public/%FF%FE"), "a non-UTF-8 image name");
    // A missing absolute non-UTF-8 path is a 404 quoting it; a guest file so named lists as JSON.
    for (const auto& op : {std::string(), std::string("/stat"), std::string("/list")}) {
        expect_json_4xx(call("GET", files + op, {}, "", "path=/%FF%FE/missing"), "GET " + op);
    }
    ASSERT_EQ(call("PUT", files, "x", "application/octet-stream",
                   "path=/tmp/badinput-utf8/%FF%FE&createDirs=true")
                  .status,
              200);
    const auto listing = call("GET", files + "/list", {}, "", "path=/tmp/badinput-utf8");
    boost::system::error_code ec;
    const auto parsed = json::parse(listing.body, ec);
    EXPECT_EQ(listing.status, 200) << listing.body;
    EXPECT_TRUE(!ec && parsed.is_object()) << "a non-UTF-8 file name made the listing invalid JSON";
    EXPECT_EQ(call("DELETE", files, {}, "", "path=/tmp/badinput-utf8&recursive=true").status / 100,
              2);
}

}  // namespace
}  // namespace maf_sandbox::badinput
