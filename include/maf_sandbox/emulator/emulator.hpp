// acas-emulator: the ACAS data-plane REST API (docs/emulator.md) served over HTTPS on top of the
// local sandbox runtime, so the ACAS backend runs end to end on one machine.
//
// Every answer carries `x-acas-emulator: <version>; isolation=<rung>` naming the isolation the
// runtime really provides, so no client can mistake it for the microVM service.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/runtime/host/images.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::emulator {

inline constexpr const char* kEmulatorVersion = "0.1.0";
inline constexpr const char* kApiVersion = "2026-02-01-preview";
inline constexpr const char* kPagingApiVersion = "2026-09-01-preview";

// Fault injection for tests; every rate is a probability in [0, 1] applied per data-plane request.
struct FaultOptions {
    double rate_429 = 0.0;           // answered 429 with Retry-After: 1
    std::uint64_t first_403 = 0;     // the first N data-plane requests answered 403 (RBAC window)
    std::uint64_t forbidden_ms = 0;  // every data-plane request answered 403 for this long after
                                     // start (or after PUT /admin/faults): an RBAC window in time
    double rate_5xx = 0.0;           // answered 503
    std::uint64_t latency_ms = 0;
    std::uint64_t create_delay_ms = 0;  // extra time a new sandbox spends in Creating
    double drop_rate = 0.0;             // handled, then the connection closed mid-response
    std::uint64_t retry_after_ms = 0;   // 429 wait; 0: Retry-After: 1 only, else also
                                        // retry-after-ms (azure-core honours it first)
    std::uint64_t seed = 0;             // 0: random
    // Empty: faults apply to every data-plane request. Else only to this operation, written as
    // METHOD and the path after the group with ids as {id}: "PUT /sandboxes",
    // "POST /sandboxes/{id}/executeShellCommand", "GET /diskimages/{id}".
    std::string only;
};

// The runtime's import caps at their defaults, naming the serve flags that raise them.
inline runtime::ImportLimits emulator_image_limits() {
    runtime::ImportLimits limits;
    limits.max_bytes_setting = "acas-emulator serve --image-max-bytes";
    limits.max_entries_setting = "acas-emulator serve --image-max-entries";
    limits.max_depth_setting = "acas-emulator serve --image-max-depth";
    limits.min_free_setting = "acas-emulator serve --image-min-free-percent";
    return limits;
}

// What one file-plane request, and all of them together, may make the emulator hold in memory. A
// guest controls the size of its files and directories, and the emulator's memory is not charged
// to the sandbox, so every buffer the plane fills from the guest is bounded (docs/emulator.md,
// "Memory bounds"; the flags are --max-list-entries, --max-list-bytes, --file-budget-bytes).
struct FilePlaneLimits {
    // A listing answers at most this many entries and this many body bytes; a larger directory
    // is refused 413 ListingTooLarge while it is read (the service has no paging to offer).
    std::uint64_t max_list_entries = 20000;
    std::uint64_t max_list_bytes = 8ull << 20;
    // A read is sent in pieces of this size: its memory is one piece, whatever the file's size.
    std::uint64_t read_chunk_bytes = 1ull << 20;
    // The most bytes every file-plane request together may hold at once (write bodies, listings,
    // read pieces). Past it a request waits briefly, then is answered 429 with Retry-After.
    std::uint64_t in_flight_bytes = 256ull << 20;
};

// For tests only: the emulator plays the real service (acas-emulator serve --impersonate-service).
// It then sends no identifying header, serves none of its own routes (/healthz, /metrics,
// /admin/faults), and lets in only an Entra ID access token: RS256, signed by `issuer_key_pem`'s
// key, for `audience`, issued in `tenant` and not expired. That is what a client in real-service
// mode, with a credential from a stand-in identity provider, must get right end to end.
struct ServiceImpersonation {
    std::string issuer_key_pem;  // the stand-in Entra ID's public key (or its certificate), PEM
    std::string tenant;          // the tenant every token must name (tid and iss)
    std::string audience = "https://dynamicsessions.io";  // the data plane's resource
};

struct EmulatorOptions {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;
    std::filesystem::path state_dir;
    // TLS: a certificate and key, or a self-signed pair (CA written to <state_dir>/ca.pem). Both
    // unset with plain_http false means self-signed.
    std::optional<std::filesystem::path> tls_cert;
    std::optional<std::filesystem::path> tls_key;
    bool plain_http = false;           // tests of the HTTP layer only; the Azure SDKs refuse http
    std::optional<std::string> token;  // when set, only this bearer token is accepted
    std::optional<ServiceImpersonation> impersonation;  // tests only: look like the real service
    bool public_metrics = false;                        // GET /metrics without a bearer token
    std::map<std::string, std::string> aliases;  // catalogue name -> local image ("host", ...)
    FaultOptions faults;
    std::size_t default_page_size = 100;
    // How long a deleted sandbox stays visible as Deleting (GET, list, a repeated DELETE 202)
    // before GET answers 404: the service keeps it a while too (reference 4.3). Counted from the
    // DELETE; if ending the sandbox takes longer, it is gone once that is done.
    std::chrono::milliseconds deleting_retention{2000};
    std::size_t worker_threads = 16;  // blocking runtime work (launch, exec, files)
    // Caps on a disk-image import's unpack into the runtime's image store (images.hpp); a
    // refusal names the serve flags below.
    runtime::ImportLimits image_limits = emulator_image_limits();

    FilePlaneLimits file_limits;
};

// One emulator instance on an io_context. start() binds and starts serving; stop() is graceful.
class Emulator {
  public:
    Emulator(boost::asio::any_io_executor executor, EmulatorOptions options,
             std::shared_ptr<spdlog::logger> logger);
    ~Emulator();
    Emulator(const Emulator&) = delete;
    Emulator& operator=(const Emulator&) = delete;

    // Loads the state, reattaches sandboxes, binds; returns the port. Throws Error on failure.
    std::uint16_t start();
    // "https://127.0.0.1:PORT" (or http://).
    std::string base_url() const;
    // Stops accepting, finishes in-flight requests (bounded), persists the state. Sandboxes keep
    // running.
    Task<void> stop(Seconds grace);

  private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

// The `acas-emulator` command line: `serve ...` and `images add ARCHIVE --ref REF`.
int emulator_main(int argc, char** argv);

}  // namespace maf_sandbox::emulator
