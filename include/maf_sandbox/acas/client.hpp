// The REST client of the ACAS data plane (docs/acas-rest-api.md section 4), over net::HttpClient
// with an Azure token. One client belongs to one executor. Every call carries a deadline, an
// x-ms-client-request-id and the api-version below; no call ever goes to the ARM control plane.
//
// Retries: an idempotent request (GET, file PUT, DELETE, and the POSTs whose
// effect is a replace: lifecycle, mkdir) retries transport failures and 408/429/5xx (not 501/505)
// up to RetryPolicy::max_attempts within its deadline, with capped exponential backoff that
// honours Retry-After, retry-after-ms and x-ms-retry-after-ms. A 403 is retried for
// RetryPolicy::forbidden_window (RBAC propagation). A 429 with Retry-After is waited out for any
// request. An exec POST that fails after it was sent, or gets any other retryable status, is
// never re-sent: AcasRequestOutcomeUnknown. A create PUT is re-sent only when it provably never
// left (connect failure) or after a 429 with Retry-After.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "maf_sandbox/azure/credential.hpp"
#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::net {
class HttpClient;
struct HttpResponse;
}  // namespace maf_sandbox::net

namespace maf_sandbox::acas {

// The one api-version this client speaks. Changing it requires the emulator suite and the live
// suite to pass again.
inline constexpr std::string_view kApiVersion = "2026-02-01-preview";
inline constexpr std::string_view kEmulatorHeader = "x-acas-emulator";
inline constexpr std::string_view kUserAgent = "maf-sandbox-acas/0.1 (cpp)";

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;
Deadline deadline_after(Seconds budget);

struct RetryPolicy {
    int max_attempts = 12;  // the first try plus at least ten retries
    Seconds initial_backoff{0.8};
    Seconds max_backoff{10.0};
    Seconds forbidden_window{100.0};
};

struct AcasClientOptions {
    std::string endpoint;  // https://management.<region>.azuredevcompute.io, no trailing slash
    std::string subscription_id;
    std::string resource_group;
    std::string sandbox_group;
    std::optional<std::string> ca_file;
    std::shared_ptr<azure::TokenCredential> credential;
    // Emulator mode: answers must carry the emulator header and the rung it names is recorded.
    // Off: an answer carrying it is refused (AcasEmulatorMismatch).
    bool emulator = false;
    RetryPolicy retry;
    std::shared_ptr<spdlog::logger> log;
};

struct SandboxInfo {
    std::string id;
    std::string state;  // as the service spells it ("Running")
    std::string stopped_reason;
    std::map<std::string, std::string> labels;
    std::string egress_default_action;      // "Allow" when the service sent no policy
    std::vector<std::string> egress_hosts;  // hostRules patterns with action Allow
    std::string created_at;                 // ISO 8601 as the service sent it; may be empty
    // sourcesRef.diskImage as the service echoed it: an imported image's id, else a catalogue
    // name (nullopt when the answer had neither).
    std::optional<std::string> source_disk_image_id;
    std::optional<std::string> source_name;
};

struct ExecAnswer {
    std::string stdout_text;
    std::string stderr_text;
    int exit_code = 0;
};

struct DiskImageInfo {
    std::string id;
    std::string name;
    std::string base;  // image.base, the OCI reference it was built from
    std::string state;
};

struct CreateSandboxRequest {
    // Exactly one of these.
    std::optional<std::string> prebuilt_name;
    std::optional<std::string> disk_image_id;
    std::map<std::string, std::string> labels;
    std::vector<std::string> allow_hosts;  // empty: closed (Deny, Full inspection, no rules)
    int auto_suspend_seconds = 300;
    std::string cpu = "1000m";
    std::string memory = "2048Mi";
};

struct LifecyclePolicy {
    int auto_suspend_seconds = 60;
    int auto_delete_seconds = 600;
};

struct AcasClientStats {
    std::size_t requests = 0;  // HTTP requests sent, retries included
    std::size_t retries = 0;
};

class AcasClient {
  public:
    // Throws InvalidArgument for a bad endpoint or ids, or a CA file that does not load.
    AcasClient(boost::asio::any_io_executor executor, AcasClientOptions options);
    ~AcasClient();
    AcasClient(const AcasClient&) = delete;
    AcasClient& operator=(const AcasClient&) = delete;

    // --- Sandboxes --------------------------------------------------------------------------
    Task<SandboxInfo> create_sandbox(CreateSandboxRequest request, Deadline deadline);
    // nullopt on 404.
    Task<std::optional<SandboxInfo>> get_sandbox(std::string id, Deadline deadline);
    // Every sandbox carrying all `labels` (follows validated nextLinks).
    Task<std::vector<SandboxInfo>> list_sandboxes(std::map<std::string, std::string> labels,
                                                  Deadline deadline);
    // false when it was already gone (404).
    Task<bool> delete_sandbox(std::string id, Deadline deadline);
    // Polls GET every `interval` until Running (a 404 means not visible yet). Throws
    // AcasServiceError when the state is Failed or Deleting, Timeout at the deadline.
    Task<SandboxInfo> wait_until_running(std::string id, Seconds interval, Deadline deadline);
    // Polls GET until 404. Throws Timeout at the deadline.
    Task<void> wait_until_deleted(std::string id, Seconds interval, Deadline deadline);
    // GET; resumes a stopped/suspended/idle sandbox (unless disabled) and waits for Running.
    Task<SandboxInfo> ensure_running(std::string id, Seconds interval, Deadline deadline);
    Task<void> set_lifecycle(std::string id, LifecyclePolicy policy, Deadline deadline);

    // --- Exec ------------------------------------------------------------------------------
    // One POST executeShellCommand, its answer bounded by `max_response_bytes`. Never re-sent
    // once it may have reached the service (see the header comment).
    Task<ExecAnswer> exec(std::string id, std::string command,
                          std::optional<std::string> working_directory, Deadline deadline,
                          std::size_t max_response_bytes);

    // --- Files (host authority) ------------------------------------------------------------
    // The raw entry object; nullopt on 404.
    Task<std::optional<boost::json::object>> stat_raw(std::string id, std::string path,
                                                      Deadline deadline);
    // The raw listing object ({path, entries}); nullopt on 404.
    Task<std::optional<boost::json::object>> list_raw(std::string id, std::string path,
                                                      Deadline deadline);
    // The bytes; nullopt on 404. Throws SandboxTransferCapExceeded past max_bytes.
    Task<std::optional<std::string>> read_file(std::string id, std::string path,
                                               std::uint64_t max_bytes, Deadline deadline);
    Task<void> write_file(std::string id, std::string path, std::string bytes, Deadline deadline);
    // false when it was already gone.
    Task<bool> delete_file(std::string id, std::string path, bool recursive, Deadline deadline);
    Task<void> mkdir(std::string id, std::string path, Deadline deadline);

    // --- Images ----------------------------------------------------------------------------
    Task<std::vector<std::string>> list_prebuilt_images(Deadline deadline);
    Task<std::vector<DiskImageInfo>> list_disk_images(Deadline deadline);
    Task<DiskImageInfo> create_disk_image(std::string base, std::optional<std::string> name,
                                          Deadline deadline);
    Task<std::optional<DiskImageInfo>> get_disk_image(std::string id, Deadline deadline);

    // The rung the emulator named in its header ("isolation=<rung>"), once any answer carried it.
    std::optional<Isolation> emulator_rung() const;
    AcasClientStats stats() const;
    // Closes idle connections.
    void close();

    // The group prefix (/subscriptions/.../sandboxGroups/<group>) joined to `path`, as a URL.
    std::string url(std::string_view path, std::string_view query = {}) const;

  private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

// A path segment (subscription, resource group, group, sandbox id): non-empty, without '/',
// '\', "..", or NUL. Throws InvalidArgument naming `what`.
void require_path_segment(std::string_view value, std::string_view what);

}  // namespace maf_sandbox::acas
