// Egress for a local sandbox: the policy a spec asks for, the allowlist rules it compiles to, and
// the egress proxy that enforces `allowlist`.
//
// The proxy runs outside the sandbox, in the host's network namespace, as its own process. The
// guest reaches it only through one TCP listener that the sandbox's PID 1 creates on
// 127.0.0.1:kGuestProxyPort inside the sandbox's otherwise empty network namespace and hands over
// (SCM_RIGHTS): a socket stays in the namespace it was created in, so the guest connects locally
// and the proxy's outbound connections leave from the host. When the proxy dies the listener dies
// with it and the guest's connects are refused: it fails closed, never open.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/value.hpp>

#include "maf_sandbox/core/vocabulary.hpp"

namespace maf_sandbox::runtime {

// The port the guest's http_proxy / https_proxy (both cases) point at, on 127.0.0.1.
inline constexpr std::uint16_t kGuestProxyPort = 3128;

// One compiled egress_allow entry. `example.com` allows exactly that host, `*.example.com` any
// name strictly below it; a bare host allows ports 80 and 443, `HOST:PORT` exactly that port.
// Names are kept lower-case; matching is case-insensitive and ignores one trailing dot.
struct EgressRule {
    std::string host;  // without the "*." of a wildcard
    bool wildcard = false;
    std::vector<std::uint16_t> ports;

    bool matches(std::string_view host, std::uint16_t port) const;
};

// Throws InvalidArgument naming the entry when one is malformed (empty, a scheme or path, a bad
// port, a wildcard anywhere but the first label, an IP literal).
std::vector<EgressRule> compile_allowlist(const std::vector<std::string>& egress_allow);

// The policy a sandbox was created with. Two policies are the same when their modes are equal and
// their allowlists are equal as case-insensitive, order-insensitive sets.
struct EgressPolicy {
    Egress mode = Egress::closed;
    std::vector<std::string> allow;  // canonical: lower-cased, sorted, deduplicated

    static EgressPolicy make(Egress mode, const std::vector<std::string>& egress_allow);
    bool operator==(const EgressPolicy& other) const = default;

    boost::json::value to_json() const;
    static EgressPolicy from_json(const boost::json::value& json);
};

// One proxy decision, as the per-sandbox decision log records it (one JSON object per line).
struct EgressDecision {
    std::chrono::system_clock::time_point time;
    std::string method;  // "CONNECT", "GET", ...
    std::string host;    // as the guest named it
    std::uint16_t port = 0;
    bool allowed = false;
    std::string reason;  // why it was refused ("host not in allowlist", "sni mismatch", ...)
};

// Reads a decision log; a missing file is an empty log. A torn last line is skipped.
std::vector<EgressDecision> read_egress_decisions(const std::filesystem::path& log);

// Bounds on a sandbox's egress decision log, a file on the host that the guest's requests make
// grow. Records past `records_per_second` in one second are counted, not written, and the count
// becomes one {"time":...,"suppressed":N} line; once the file holds `max_bytes` (less room for a
// last {"time":...,"log_full":true,...} line) nothing more is written. Decisions are made either
// way: the log is the audit trail, not the enforcement. Each field is cut to the lengths below.
struct EgressLogLimits {
    // MAF_SANDBOX_EGRESS_LOG_BYTES. launch_sandbox lowers it to a share of the sandbox's disk
    // limit (egress_log_budget) and takes it out of the writable layer.
    std::uint64_t max_bytes = 4ull << 20;
    // MAF_SANDBOX_EGRESS_LOG_RATE.
    std::uint32_t records_per_second = 50;

    boost::json::value to_json() const;
    static EgressLogLimits from_json(const boost::json::value& json);
    bool operator==(const EgressLogLimits& other) const = default;
};

// The longest field values the log keeps, in bytes; a longer one is cut (at a UTF-8 character
// boundary) and ends in "...".
inline constexpr std::size_t kEgressLogMethodBytes = 16;
inline constexpr std::size_t kEgressLogHostBytes = 256;
inline constexpr std::size_t kEgressLogReasonBytes = 160;
// The share of a sandbox's disk limit its decision log may take at most (1/64: 32 MiB of the
// default 2 GiB, so the 4 MiB default applies unless the disk is under 256 MiB).
inline constexpr std::uint64_t kEgressLogDiskShare = 64;

// What a sandbox's decision log may hold: min(limit, disk_bytes / kEgressLogDiskShare), and at
// least 64 KiB so that a tiny disk still records something.
std::uint64_t egress_log_budget(std::uint64_t limit, std::uint64_t disk_bytes);

// Operator switches no spec can set (read by the backend's config, passed down to the proxy).
struct EgressOperatorOptions {
    // MAF_SANDBOX_EGRESS_HOSTS_FILE: a hosts-format file consulted before DNS.
    std::optional<std::filesystem::path> hosts_file;
    // MAF_SANDBOX_EGRESS_ALLOW_PRIVATE=1: lets the proxy connect to loopback, link-local, private
    // and metadata addresses (where a test's own hosts live).
    bool allow_private = false;
    EgressLogLimits decision_log;

    // From the environment variables of the calling process named above.
    static EgressOperatorOptions from_environment();
    boost::json::value to_json() const;
    static EgressOperatorOptions from_json(const boost::json::value& json);
};

struct EgressProxyOptions {
    std::vector<EgressRule> rules;
    EgressOperatorOptions operator_options;
    std::filesystem::path decision_log;  // appended to, one JSON line per decision
    // When >= 0: the decision log already open for appending (owned by run_egress_proxy from
    // then on), used instead of opening `decision_log`. The supervisor's proxy writes through it
    // and cannot open a file for writing itself.
    int decision_log_fd = -1;
    std::chrono::milliseconds connect_timeout{10000};
    std::chrono::milliseconds header_timeout{30000};  // for the request head / ClientHello
    // A forwarded exchange or tunnel with no bytes moving either way for this long is closed.
    std::chrono::milliseconds idle_timeout{300000};
    // Guest connections served at once; connections over the limit are closed on accept.
    std::size_t max_sessions = 256;
};

// How many sessions the proxy serves at once within RLIMIT_NOFILE `nofile`: each session holds
// the guest's connection, the upstream one, a relay pipe each way and a resolver socket while it
// resolves, and the process keeps a few of its own (listener, lifetime, log, event loop). At
// least 1; the proxy closes the connections past it on accept, so a flood never reaches EMFILE.
std::size_t egress_sessions_within(std::uint64_t nofile);

// Serves the proxy on `listener` (a listening TCP socket, owned from here on) until `lifetime_fd`
// becomes readable or hangs up (a pidfd of the sandbox's PID 1, or a pipe whose writer is the
// sandbox) and returns the process's exit status. Blocking: runs its own io_context. Used by the
// supervisor's host-side half in the proxy process it forks, and by tests.
//
// What it serves: absolute-form HTTP forwarding ("GET http://host[:port]/path"; the Host header
// must name the same host and port; hop-by-hop and Proxy-* fields are dropped; one request per
// connection, "Connection: close" both ways; redirects are relayed, never followed) and CONNECT
// host:port, whose first bytes must be a TLS ClientHello naming the same host in its SNI (no SNI,
// another name, an encrypted ClientHello or a non-TLS payload closes the tunnel: non-TLS tunnels
// are refused on every port, plain HTTP goes through forwarding where each request is checked).
// Hosts that are IP literals are refused. Names resolve through the operator hosts file (read
// once, at start) or the system resolver, only after the rules allowed them, and resolved
// addresses in refused ranges are dropped before connecting. Every refusal before a tunnel opens
// is "403 Forbidden" with `x-deny-reason`; an allowed host that cannot be reached is 502 or 504.
// Each session logs exactly one decision. Returns 0 when the lifetime ended and 1 when the proxy
// could not run (an unreadable hosts file, an unwritable decision log): the listener is closed
// either way, so the guest's connects are refused. SIGPIPE is blocked in the calling thread while
// it runs (tunnels are spliced, and splice(2) cannot suppress it) and the mask restored on return.
int run_egress_proxy(int listener, int lifetime_fd, const EgressProxyOptions& options);

}  // namespace maf_sandbox::runtime
