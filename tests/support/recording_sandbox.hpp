// A decorator over a real Sandbox for tests: forwards every call, records what was asked, and lets
// a test bend one behaviour (rewrite a command, delay after exec, make exec fail, adjust a stat)
// while everything else stays real.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::testing {

class RecordingSandbox : public Sandbox {
  public:
    explicit RecordingSandbox(Sandbox& inner) : inner_(inner) {}

    // What was asked, in order.
    std::vector<ExecRequest> execs;
    std::vector<std::string> stats;
    std::vector<std::pair<std::string, std::uint64_t>> reads;  // path, max_bytes
    std::vector<std::string> writes;

    // Applied to each request before it is forwarded.
    std::function<void(ExecRequest&)> rewrite;
    // Waited after each exec returns (pushes a deadline past its end between commands).
    Seconds exec_delay{0.0};
    // When set, exec records the request and then throws this instead of forwarding.
    std::exception_ptr exec_failure;
    // Applied to each stat answer.
    std::function<void(std::optional<SandboxEntry>&)> adjust_stat;

    std::string base_directory() const override { return inner_.base_directory(); }

    Task<ExecResult> exec(ExecRequest request) override {
        if (rewrite) {
            rewrite(request);
        }
        execs.push_back(request);
        if (exec_failure) {
            std::rethrow_exception(exec_failure);
        }
        auto result = co_await inner_.exec(std::move(request));
        if (exec_delay > Seconds{0}) {
            boost::asio::steady_timer timer(
                co_await boost::asio::this_coro::executor,
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(exec_delay));
            co_await timer.async_wait(boost::asio::use_awaitable);
        }
        co_return result;
    }
    Task<ExecResult> run_code(std::string code, Seconds timeout) override {
        return inner_.run_code(std::move(code), timeout);
    }
    Task<void> write_file(std::string path, std::string content,
                          std::string working_directory) override {
        writes.push_back(path);
        return inner_.write_file(std::move(path), std::move(content), std::move(working_directory));
    }
    Task<std::optional<SandboxEntry>> stat_file(std::string path,
                                                std::string working_directory) override {
        stats.push_back(path);
        auto entry = co_await inner_.stat_file(std::move(path), std::move(working_directory));
        if (adjust_stat) {
            adjust_stat(entry);
        }
        co_return entry;
    }
    Task<std::string> read_file(std::string path, std::string working_directory,
                                std::uint64_t max_bytes) override {
        reads.emplace_back(path, max_bytes);
        return inner_.read_file(std::move(path), std::move(working_directory), max_bytes);
    }
    Task<std::vector<SandboxEntry>> list_dir(std::string path,
                                             std::string working_directory) override {
        return inner_.list_dir(std::move(path), std::move(working_directory));
    }
    Task<void> remove(std::string path, std::string working_directory, bool recursive) override {
        return inner_.remove(std::move(path), std::move(working_directory), recursive);
    }
    Task<void> reclaim(std::string directory, std::string working_directory,
                       Seconds timeout) override {
        return inner_.reclaim(std::move(directory), std::move(working_directory), timeout);
    }

  private:
    Sandbox& inner_;
};

}  // namespace maf_sandbox::testing
