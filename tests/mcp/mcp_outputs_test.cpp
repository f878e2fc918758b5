// Files an MCP call hands back, over a real shell sandbox (HostShellBackend): outputs named per
// call by name or glob come back as image content and resource links the session serves, land
// under --out-dir/<session>/<call>/ without colliding, stay inside the call directory (links are
// never followed), and upload_file/download_file move bytes exactly.
#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "host_shell_backend.hpp"
#include "maf_sandbox/core/file_transfer.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/mcp/server.hpp"
#include "test_dirs.hpp"

namespace maf_sandbox::mcp {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using testing::HostShellBackend;
using testing::TempDir;

// A program that writes a small SVG chart and a CSV, the way a model's plotting code would.
constexpr const char* kChartProgram =
    "rows = [(1, 3), (2, 5), (3, 4)]\n"
    "bars = ''.join(f'<rect x=\"{x * 20}\" y=\"{60 - y * 10}\" width=\"15\" height=\"{y * 10}\"/>'"
    " for x, y in rows)\n"
    "open('chart.svg', 'w').write('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100\" "
    "height=\"60\">' + bars + '</svg>')\n"
    "open('out.csv', 'w').write('x,y\\n' + ''.join(f'{x},{y}\\n' for x, y in rows))\n"
    "open('notes.txt', 'w').write('not asked for')\n";

std::string string_of(const json::value& value) {
    return std::string(value.as_string());
}

std::string read_host_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream content;
    content << in.rdbuf();
    return content.str();
}

class McpOutputsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        log_ = std::make_shared<spdlog::logger>(
            "mcp-outputs-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text_));
        log_->set_level(spdlog::level::info);
        backend_ = std::make_shared<HostShellBackend>();
        SandboxRouterOptions options;
        options.min_isolation = Isolation::none;
        options.log = log_;
        router_ = std::make_shared<SandboxRouter>(
            std::vector<std::shared_ptr<SandboxBackend>>{backend_}, options);
        kinds::CodeActConfig codeact;
        codeact.outputs_per_call = true;
        codeact.sandbox.files_out.max_files = 3;
        McpServerConfig config;
        config.scope = "outputs-scope";
        config.out_dir = out_dir_.path();
        server_ = std::make_unique<McpServer>(
            config, router_,
            std::make_shared<kinds::CodeActTool>(router_, codeact, nullptr, std::nullopt, log_),
            std::make_shared<kinds::ShellTool>(router_, kinds::ShellConfig{}, log_), log_);
    }

    std::shared_ptr<McpSession> open(const std::string& id) {
        auto session = server_->open_session(id);
        handle(
            *session,
            R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})");
        return session;
    }

    json::object handle(McpSession& session, std::string text) {
        auto reply = run_blocking(io_, session.handle(std::move(text)));
        EXPECT_TRUE(reply.has_value());
        return reply ? json::parse(*reply).as_object() : json::object{};
    }

    json::object call(McpSession& session, std::string_view tool, json::object arguments) {
        json::object request{{"jsonrpc", "2.0"},
                             {"id", ++next_id_},
                             {"method", "tools/call"},
                             {"params", json::object{{"name", tool}, {"arguments", arguments}}}};
        return handle(session, json::serialize(request));
    }

    json::object execute(McpSession& session, std::string code, json::array outputs) {
        auto reply = call(session, "execute_code",
                          json::object{{"code", std::move(code)}, {"outputs", std::move(outputs)}});
        return reply.at("result").as_object();
    }

    json::object read_resource(McpSession& session, std::string_view uri) {
        json::object request{{"jsonrpc", "2.0"},
                             {"id", ++next_id_},
                             {"method", "resources/read"},
                             {"params", json::object{{"uri", uri}}}};
        return handle(session, json::serialize(request));
    }

    // The content items of one type.
    static std::vector<json::object> items(const json::object& result, std::string_view type) {
        std::vector<json::object> found;
        for (const auto& item : result.at("content").as_array()) {
            if (item.at("type").as_string() == type) {
                found.push_back(item.as_object());
            }
        }
        return found;
    }

    TempDir out_dir_{"maf-mcp-out"};
    boost::asio::io_context io_;
    std::ostringstream log_text_;
    std::shared_ptr<spdlog::logger> log_;
    std::shared_ptr<HostShellBackend> backend_;
    std::shared_ptr<SandboxRouter> router_;
    std::unique_ptr<McpServer> server_;
    std::int64_t next_id_ = 0;
};

TEST_F(McpOutputsTest, AnSvgComesBackAsImageContentAndACsvAsAResourceTheSessionServes) {
    auto session = open("session-a");
    auto result = execute(*session, kChartProgram, json::array{"*.svg", "out.csv"});
    ASSERT_FALSE(result.at("isError").as_bool()) << json::serialize(result);

    const auto images = items(result, "image");
    ASSERT_EQ(images.size(), 1u) << json::serialize(result);
    EXPECT_EQ(string_of(images[0].at("mimeType")), "image/svg+xml");
    const auto svg = base64_decode(images[0].at("data").as_string());
    EXPECT_EQ(svg.rfind("<svg", 0), 0u) << svg;
    EXPECT_NE(svg.find("<rect"), std::string::npos);

    const auto links = items(result, "resource_link");
    ASSERT_EQ(links.size(), 2u) << "notes.txt was not asked for: " << json::serialize(result);
    const auto csv = std::find_if(links.begin(), links.end(), [](const json::object& link) {
        return link.at("name").as_string() == "out.csv";
    });
    ASSERT_NE(csv, links.end());
    EXPECT_EQ(string_of(csv->at("mimeType")), "text/csv");
    const auto uri = string_of(csv->at("uri"));
    EXPECT_EQ(uri.rfind("maf-sandbox://output/", 0), 0u) << uri;

    auto read = read_resource(*session, uri);
    const auto& contents = read.at("result").at("contents").as_array();
    ASSERT_EQ(contents.size(), 1u);
    EXPECT_EQ(string_of(contents[0].at("text")), "x,y\n1,3\n2,5\n3,4\n");

    json::object list_request{{"jsonrpc", "2.0"}, {"id", 99}, {"method", "resources/list"}};
    auto listed = handle(*session, json::serialize(list_request));
    EXPECT_EQ(listed.at("result").at("resources").as_array().size(), 2u);

    const auto& outputs = result.at("structuredContent").at("outputs").as_array();
    ASSERT_EQ(outputs.size(), 2u);
    for (const auto& output : outputs) {
        const auto landed_as = string_of(output.at("landed_as"));
        EXPECT_EQ(landed_as.rfind("session-a/", 0), 0u) << landed_as;
        EXPECT_TRUE(fs::is_regular_file(out_dir_.path() / landed_as)) << landed_as;
    }
    EXPECT_EQ(
        result.at("content").as_array()[0].at("text").as_string().find(out_dir_.path().string()),
        std::string::npos)
        << "the model never sees a host path";
}

TEST_F(McpOutputsTest, TwoSessionsAndTwoCallsWritingOutCsvLandInSeparateDirectories) {
    auto first = open("session-one");
    auto second = open("session-two");
    const auto program = [](std::string_view text) {
        return fmt::format("open('out.csv', 'w').write('{}\\n')\n", text);
    };
    std::vector<std::pair<std::string, std::string>> landed;  // landed_as, content
    for (auto [session, text] :
         {std::pair{first, "first"}, std::pair{second, "second"}, std::pair{first, "third"}}) {
        auto result = execute(*session, program(text), json::array{"out.csv"});
        ASSERT_FALSE(result.at("isError").as_bool()) << json::serialize(result);
        const auto& outputs = result.at("structuredContent").at("outputs").as_array();
        ASSERT_EQ(outputs.size(), 1u);
        landed.emplace_back(string_of(outputs[0].at("landed_as")), std::string(text) + "\n");
    }
    EXPECT_EQ(landed[0].first.rfind("session-one/", 0), 0u);
    EXPECT_EQ(landed[1].first.rfind("session-two/", 0), 0u);
    EXPECT_EQ(landed[2].first.rfind("session-one/", 0), 0u);
    EXPECT_NE(landed[0].first, landed[2].first) << "two calls of one session";
    for (const auto& [path, content] : landed) {
        EXPECT_EQ(read_host_file(out_dir_.path() / path), content) << path;
    }
}

TEST_F(McpOutputsTest, AResourceUriIsServedOnlyToTheSessionThatReceivedIt) {
    auto owner = open("owner");
    auto other = open("other");
    auto result = execute(*owner, "open('out.csv', 'w').write('secret')\n", json::array{"*.csv"});
    const auto links = items(result, "resource_link");
    ASSERT_EQ(links.size(), 1u) << json::serialize(result);
    const auto uri = string_of(links[0].at("uri"));
    EXPECT_EQ(read_resource(*owner, uri).at("result").at("contents").as_array().size(), 1u);
    auto refused = read_resource(*other, uri);
    EXPECT_EQ(refused.at("error").at("code").as_int64(), -32002);
    auto guessed =
        read_resource(*owner, "maf-sandbox://output/00000000000000000000000000000000/out.csv");
    EXPECT_EQ(guessed.at("error").at("code").as_int64(), -32002);
}

TEST_F(McpOutputsTest, AGlobNeverFollowsALinkOutOfTheCallDirectory) {
    auto session = open("links");
    // leak.csv points at a host file; only the regular file is returned.
    auto result = execute(*session,
                          "import os\nos.symlink('/etc/passwd', 'leak.csv')\n"
                          "os.mkdir('real')\nopen('real/kept.csv', 'w').write('kept')\n"
                          "os.symlink('/etc', 'linked')\n",
                          json::array{"*.csv", "*/*.csv", "linked/passwd"});
    ASSERT_FALSE(result.at("isError").as_bool()) << json::serialize(result);
    const auto links = items(result, "resource_link");
    ASSERT_EQ(links.size(), 1u) << json::serialize(result);
    EXPECT_EQ(string_of(links[0].at("name")), "real/kept.csv");
    const std::string text(result.at("content").as_array()[0].at("text").as_string());
    EXPECT_NE(text.find("no file matched these outputs:\n  *.csv\n  linked/passwd"),
              std::string::npos)
        << text;
}

TEST_F(McpOutputsTest, MoreFilesThanTheCapAreRefusedAndNoneReturned) {
    auto session = open("over-cap");
    auto result =
        execute(*session, "for i in range(4):\n    open(f'f{i}.csv', 'w').write(str(i))\n",
                json::array{"*.csv"});
    EXPECT_TRUE(result.at("isError").as_bool());
    EXPECT_TRUE(items(result, "resource_link").empty());
    const std::string text(result.at("content").as_array()[0].at("text").as_string());
    EXPECT_NE(text.find("went over the transfer cap"), std::string::npos) << text;
}

TEST_F(McpOutputsTest, APatternLeavingTheWorkingDirectoryIsRefusedBeforeAnythingRuns) {
    auto session = open("escape");
    auto result = execute(*session, "open('/tmp/should-not-run', 'w')\n", json::array{"../*"});
    EXPECT_TRUE(result.at("isError").as_bool());
    const std::string text(result.at("content").as_array()[0].at("text").as_string());
    EXPECT_NE(text.find("cannot name an output"), std::string::npos) << text;
    EXPECT_FALSE(result.at("structuredContent").as_object().contains("exit_code"));
}

TEST_F(McpOutputsTest, UploadThenDownloadIsByteExactAndTheProgramReadsTheUpload) {
    auto session = open("transfer");
    std::string bytes("\x00\x01binary\x00\xff\xfe\n", 12);
    for (int i = 0; i < 256; ++i) {
        bytes += static_cast<char>(i);
    }
    auto uploaded =
        call(*session, "upload_file",
             json::object{{"path", "data/blob.bin"}, {"content_base64", base64_encode(bytes)}})
            .at("result")
            .as_object();
    ASSERT_FALSE(uploaded.at("isError").as_bool()) << json::serialize(uploaded);
    EXPECT_EQ(uploaded.at("structuredContent").at("size").as_int64(),
              static_cast<std::int64_t>(bytes.size()));

    // A program of the same conversation finds it one level up, and leaves a file back there.
    auto ran = call(*session, "execute_code",
                    json::object{{"code",
                                  "data = open('../data/blob.bin', 'rb').read()\n"
                                  "open('../data/reversed.bin', 'wb').write(data[::-1])\n"
                                  "print(len(data))\n"}})
                   .at("result")
                   .as_object();
    ASSERT_FALSE(ran.at("isError").as_bool()) << json::serialize(ran);
    EXPECT_EQ(string_of(ran.at("structuredContent").at("stdout")),
              std::to_string(bytes.size()) + "\n");

    for (auto [path, expected] :
         {std::pair{"data/blob.bin", bytes},
          std::pair{"data/reversed.bin", std::string(bytes.rbegin(), bytes.rend())}}) {
        auto downloaded =
            call(*session, "download_file", json::object{{"path", path}}).at("result").as_object();
        ASSERT_FALSE(downloaded.at("isError").as_bool()) << json::serialize(downloaded);
        const auto resources = items(downloaded, "resource");
        ASSERT_EQ(resources.size(), 1u);
        EXPECT_EQ(base64_decode(resources[0].at("resource").at("blob").as_string()), expected)
            << path;
    }
}

TEST_F(McpOutputsTest, FileToolsRefuseEscapingPathsAndLinks) {
    auto session = open("file-refusals");
    auto escaping = call(*session, "upload_file",
                         json::object{{"path", "../outside.txt"}, {"content_base64", "eA=="}})
                        .at("result")
                        .as_object();
    EXPECT_TRUE(escaping.at("isError").as_bool());
    auto linked = call(*session, "execute_code",
                       json::object{{"code", "import os\nos.symlink('/etc/passwd', '../pw')\n"}})
                      .at("result")
                      .as_object();
    ASSERT_FALSE(linked.at("isError").as_bool()) << json::serialize(linked);
    auto through_link =
        call(*session, "download_file", json::object{{"path", "pw"}}).at("result").as_object();
    EXPECT_TRUE(through_link.at("isError").as_bool()) << json::serialize(through_link);
    EXPECT_TRUE(items(through_link, "resource").empty());
    auto missing =
        call(*session, "download_file", json::object{{"path", "absent"}}).at("result").as_object();
    EXPECT_TRUE(missing.at("isError").as_bool());
    const std::string text(missing.at("content").as_array()[0].at("text").as_string());
    EXPECT_NE(text.find("does not exist"), std::string::npos) << text;
    auto bad_base64 = call(*session, "upload_file",
                           json::object{{"path", "x"}, {"content_base64", "not base64!"}});
    EXPECT_EQ(bad_base64.at("error").at("code").as_int64(), -32602);
}

}  // namespace
}  // namespace maf_sandbox::mcp
