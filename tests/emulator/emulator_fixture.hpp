// Runs the real `acas-emulator` binary on loopback and talks to it over HTTPS the way the Python
// SDK 0.1.0b4 does (reference sections 1.3, 4 and 6).
#pragma once

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/emulator/emulator_process.hpp"
#include "maf_sandbox/net/http_client.hpp"
#include "maf_sandbox/runtime/wire/record_cgroups.hpp"
#include "test_dirs.hpp"

namespace maf_sandbox::emulator::testing {

namespace json = boost::json;
using net::HttpRequest;
using net::HttpResponse;

inline const std::string kGroup =
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-test/sandboxGroups/"
    "group-test";
inline const std::string kApi = "api-version=2026-02-01-preview";

// A test's state directory. An emulator that exits leaves its sandboxes running, by design (the
// next start reattaches to them), so a test that ends before its deletions finished, or fails
// before it deletes, would leave them running with their directory gone. Before the directory is
// removed, whatever runs in the cgroups of a sandbox recorded beneath it
// (<state>/runtime/sandboxes/<id>) is killed and the cgroups removed, so no sandbox outlives the
// test that made it.
class TempDir : public ::maf_sandbox::testing::TempDir {
  public:
    ~TempDir() { end_sandboxes_beneath(path()); }

    static void end_sandboxes_beneath(const std::filesystem::path& top) {
        namespace fs = std::filesystem;
        std::error_code ec;
        for (fs::recursive_directory_iterator it(top, fs::directory_options::none, ec), end;
             !ec && it != end; it.increment(ec)) {
            if (it.depth() > 3 || !it->is_directory(ec) || it->is_symlink(ec)) {
                it.disable_recursion_pending();
                continue;
            }
            if (it->path().filename() != "sandboxes" ||
                it->path().parent_path().filename() != "runtime") {
                continue;
            }
            it.disable_recursion_pending();
            for (const auto& sandbox : fs::directory_iterator(it->path(), ec)) {
                try {
                    runtime::destroy_cgroups_named_for(sandbox.path().filename().string());
                } catch (const std::exception& e) {
                    ADD_FAILURE() << "ending sandbox " << sandbox.path() << ": " << e.what();
                }
            }
        }
    }
};

// One acas-emulator process (the shared launcher) with the arguments every test here uses;
// SIGTERM on destruction. Each launch logs to its own file in `state` (restart tests launch twice).
class EmulatorProcess : public emulator::EmulatorProcess {
  public:
    EmulatorProcess(const std::filesystem::path& state, std::vector<std::string> extra = {})
        : emulator::EmulatorProcess(launch(state, std::move(extra))) {}

  private:
    static emulator::EmulatorLaunch launch(const std::filesystem::path& state,
                                           std::vector<std::string> extra) {
        // The token SdkClient sends; a case's own --token, later on the line, replaces it.
        std::vector<std::string> args{"--self-signed", "--alias", "python-3.13=host", "--token",
                                      "test-token"};
        args.insert(args.end(), extra.begin(), extra.end());
        return {ACAS_EMULATOR_PATH, state, std::move(args),
                state / fmt::format("emulator-{}.log", ++launches()), std::chrono::seconds(30)};
    }
    static int& launches() {
        static int n = 0;
        return n;
    }
};

// Requests shaped like azure-containerapps-sandbox 0.1.0b4's pipeline.
class SdkClient {
  public:
    SdkClient(boost::asio::io_context& io, const std::filesystem::path& ca_file, std::string base,
              std::string token = "test-token")
        : io_(io), base_(std::move(base)), token_(std::move(token)) {
        net::HttpClientOptions options;
        options.ca_file = ca_file.string();
        options.proxy = net::ProxySettings{};
        client_ = std::make_unique<net::HttpClient>(io.get_executor(), options);
    }

    void set_base(std::string base) { base_ = std::move(base); }

    HttpResponse raw(const std::string& method, const std::string& target, std::string body = {},
                     const std::string& content_type = "application/json", bool with_token = true) {
        HttpRequest request;
        request.method = method;
        request.target = target.starts_with("https://") ? target : base_ + target;
        request.headers.set("User-Agent",
                            "azsdk-python-azure-containerapps-sandbox/0.1.0b4 Python/3.12.3 "
                            "(Linux-6.1-x86_64-with-glibc2.36)");
        request.headers.set("x-ms-client-request-id", fmt::format("req-{}", ++counter_));
        request.headers.set("Accept", "application/json");
        if (with_token) {
            request.headers.set("Authorization", "Bearer " + token_);
        }
        if (!body.empty() || method == "PUT" || method == "POST") {
            request.headers.set("Content-Type", content_type);
        }
        request.body = std::move(body);
        return run_blocking(io_, client_->send(std::move(request)));
    }

    HttpResponse call(const std::string& method, const std::string& path, std::string body = {},
                      const std::string& query = {},
                      const std::string& content_type = "application/json") {
        return raw(method,
                   kGroup + path + "?" + kApi + (query.empty() ? std::string() : "&" + query),
                   std::move(body), content_type);
    }

    static json::value body(const HttpResponse& r) { return json::parse(r.body); }

    std::string create(const std::string& labels_json = R"({"scope":"s1","thread":"t1"})",
                       const std::string& image = "python-3.13") {
        const auto body = fmt::format(
            R"({{"sourcesRef":{{"diskImage":{{"name":"{}","isPublic":true}}}},)"
            R"("resources":{{"cpu":"1000m","memory":"2048Mi"}},)"
            R"("lifecycle":{{"autoSuspendPolicy":{{"enabled":true,"interval":300,"mode":"Memory"}}}},)"
            R"("labels":{},)"
            R"("egressPolicy":{{"defaultAction":"Deny","trafficInspection":"Full"}}}})",
            image, labels_json);
        const auto r = call("PUT", "/sandboxes", body);
        EXPECT_TRUE(r.status == 200 || r.status == 201) << r.status << " " << r.body;
        return std::string(this->body(r).at("id").as_string());
    }

    // The SDK's AsyncResourceStatePoller: GET until the state, 404 means "not visible yet".
    json::object wait_for_state(const std::string& id, const std::string& state,
                                std::chrono::seconds timeout = std::chrono::seconds(60)) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < deadline) {
            const auto r = call("GET", "/sandboxes/" + id);
            if (r.status == 200) {
                auto o = body(r).as_object();
                if (o.at("state").as_string() == state) {
                    return o;
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        ADD_FAILURE() << "sandbox " << id << " never reached " << state;
        return {};
    }

    json::object exec(const std::string& id, const std::string& command,
                      const std::string& cwd = {}) {
        json::object body{{"command", command}};
        if (!cwd.empty()) {
            body["workingDirectory"] = cwd;
        }
        const auto r =
            call("POST", "/sandboxes/" + id + "/executeShellCommand", json::serialize(body));
        EXPECT_EQ(r.status, 200) << r.body;
        return this->body(r).as_object();
    }

    // Deletes every sandbox and waits (bounded) until the listing is empty: sandboxes outlive
    // the emulator, so tests clean up through the API.
    void delete_all() {
        for (int round = 0; round < 100; ++round) {
            const auto r = call("GET", "/sandboxes");
            if (r.status != 200) {
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                continue;
            }
            const auto listing = body(r);
            const auto& value = listing.at("value").as_array();
            if (value.empty()) {
                return;
            }
            for (const auto& s : value) {
                if (s.at("state").as_string() != "Deleting") {
                    call("DELETE", "/sandboxes/" + std::string(s.at("id").as_string()));
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }

    net::HttpClient& client() { return *client_; }

  private:
    boost::asio::io_context& io_;
    std::string base_;
    std::string token_;
    std::unique_ptr<net::HttpClient> client_;
    int counter_ = 0;
};

}  // namespace maf_sandbox::emulator::testing
