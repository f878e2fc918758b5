// Runs the real `acas-emulator` binary on loopback and talks to it over HTTPS the way the Python
// SDK 0.1.0b4 does (reference sections 1.3, 4 and 6).
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "maf_sandbox/net/http_client.hpp"

extern char** environ;

namespace maf_sandbox::emulator::testing {

namespace json = boost::json;
using net::HttpRequest;
using net::HttpResponse;

inline const std::string kGroup =
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-test/sandboxGroups/"
    "group-test";
inline const std::string kApi = "api-version=2026-02-01-preview";

class TempDir {
  public:
    TempDir() {
        std::string pattern = "/tmp/maf-emu-XXXXXX";
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed");
        }
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
};

// One acas-emulator process; SIGTERM on destruction.
class EmulatorProcess {
  public:
    EmulatorProcess(const std::filesystem::path& state, std::vector<std::string> extra = {}) {
        std::vector<std::string> args{ACAS_EMULATOR_PATH, "serve",       "--listen",
                                      "127.0.0.1:0",      "--state-dir", state.string(),
                                      "--self-signed",    "--alias",     "python-3.13=host"};
        args.insert(args.end(), extra.begin(), extra.end());
        std::vector<char*> argv;
        for (auto& a : args) {
            argv.push_back(a.data());
        }
        argv.push_back(nullptr);
        int out[2];
        if (::pipe(out) != 0) {
            throw std::runtime_error("pipe failed");
        }
        log_ = state / fmt::format("emulator-{}.log", ++launches());
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&actions, out[0]);
        posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
            throw std::runtime_error("cannot start acas-emulator");
        }
        posix_spawn_file_actions_destroy(&actions);
        ::close(out[1]);
        std::string line;
        pollfd p{out[0], POLLIN, 0};
        while (line.find('\n') == std::string::npos && ::poll(&p, 1, 30000) > 0) {
            char buffer[256];
            const auto n = ::read(out[0], buffer, sizeof buffer);
            if (n <= 0) {
                break;
            }
            line.append(buffer, static_cast<std::size_t>(n));
        }
        stdout_fd_ = out[0];
        first_line_ = line.substr(0, line.find('\n'));
        const std::string prefix = "listening on ";
        if (!first_line_.starts_with(prefix)) {
            throw std::runtime_error("acas-emulator did not start: '" + first_line_ + "', log " +
                                     log_.string());
        }
        base_url_ = first_line_.substr(prefix.size());
    }
    ~EmulatorProcess() { terminate(); }

    // SIGTERM and wait; returns the exit status.
    int terminate() {
        if (pid_ <= 0) {
            return status_;
        }
        ::kill(pid_, SIGTERM);
        ::waitpid(pid_, &status_, 0);
        pid_ = -1;
        ::close(stdout_fd_);
        return status_;
    }

    const std::string& base_url() const { return base_url_; }
    const std::string& first_line() const { return first_line_; }
    const std::filesystem::path& log() const { return log_; }

  private:
    static int& launches() {
        static int n = 0;
        return n;
    }
    pid_t pid_ = -1;
    int status_ = -1;
    int stdout_fd_ = -1;
    std::string base_url_;
    std::string first_line_;
    std::filesystem::path log_;
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
