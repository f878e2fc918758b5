// AcasClient's state and its one request loop (retries, deadlines, the emulator header).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cmath>
#include <mutex>

#include "maf_sandbox/acas/client.hpp"
#include "maf_sandbox/net/http.hpp"
#include "maf_sandbox/net/http_client.hpp"

namespace maf_sandbox::acas {

// How a request may be repeated (see client.hpp).
enum class Replay { idempotent, throttle_only, exec };

namespace detail {
std::string new_request_id();
std::optional<Seconds> retry_after_of(const net::HttpResponse& response);
bool is_retryable_status(int status);
std::string problem_code(const std::string& body);
// The problem's detail (or error.message), made safe to quote in an error; empty when none.
std::string problem_detail(const std::string& body);
}  // namespace detail

struct AcasClient::Impl {
    Impl(boost::asio::any_io_executor executor, AcasClientOptions options);
    ~Impl();

    // Sends with the retry rules of `replay`; returns any answer the caller must classify (2xx,
    // or a non-retryable 4xx such as 404/409), throws for the rest, the error saying which
    // request it was ("PUT /sandboxes: ...").
    Task<net::HttpResponse> send(std::string method, std::string url, std::string body,
                                 std::string content_type, Replay replay, Deadline deadline,
                                 std::size_t max_response_bytes = 64 * kMiB);
    Task<net::HttpResponse> send_with_retries(std::string method, std::string url, std::string body,
                                              std::string content_type, Replay replay,
                                              Deadline deadline, std::size_t max_response_bytes);
    // The request as an error names it: the method and the path below the sandbox group, never
    // the endpoint, the subscription or the query (a guest path).
    std::string describe_request(const std::string& method, const std::string& url) const;
    void observe_emulator_header(const net::HttpResponse& response);

    boost::asio::any_io_executor executor;
    AcasClientOptions options;
    std::string endpoint_host;
    std::uint16_t endpoint_port = 0;
    std::string group_path;
    std::unique_ptr<net::HttpClient> http;
    mutable std::mutex mutex;
    std::optional<Isolation> rung_seen;
    AcasClientStats stats;
};

}  // namespace maf_sandbox::acas
