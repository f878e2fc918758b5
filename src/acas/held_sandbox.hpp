// One sandbox this backend holds for a (key, kind) slot, with what acquire must compare on warm
// reuse (storage base, egress, credential binding) and the probe verdicts cached with it.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "maf_sandbox/acas/client.hpp"
#include "maf_sandbox/azure/credential.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::acas {

// The egress a sandbox was created with: mode and the case-folded host set (order ignored).
struct EgressRecord {
    Egress mode = Egress::closed;
    std::set<std::string> hosts;
    bool operator==(const EgressRecord&) const = default;
};
EgressRecord egress_of(const SandboxSpec& spec);
EgressRecord egress_of(const SandboxInfo& info);
std::string describe(const EgressRecord& record);

// The credential a sandbox's requests go out with: the resolver's authority and generation (the
// client pool's identity of a client) and the factory that makes its credential on a loop.
struct Binding {
    std::string authority;
    std::string generation;
    std::function<std::shared_ptr<azure::TokenCredential>(boost::asio::any_io_executor)> factory;
};

using SlotKey = std::pair<SandboxKey, std::string>;        // (key, kind)
using Conversation = std::pair<std::string, std::string>;  // (scope, thread id)

struct HeldSandbox {
    std::string id;
    SandboxKey key;
    std::string kind;
    std::string base;
    // The create source ("prebuilt:<name>" or "disk:<id>") the image hint is keyed by; empty for
    // a sandbox adopted from the service (its image is unknown, so it sets no hint).
    std::string image;
    EgressRecord egress;
    Binding binding;
    std::atomic<bool> invalidated{false};
    // Set when acquire returned it: only then can a caller have left state in it, so only then
    // does its invalidation make the key's next acquire report a replacement.
    std::atomic<bool> handed_out{false};
    // Probe results cached with the sandbox; failures are not cached (the next acquire retries).
    std::mutex probe_mutex;
    bool capture_ok = false;
    bool host_tools_ok = false;
    bool removal_probed = false;
    std::optional<bool> removal_verdict;

    SlotKey slot() const { return {key, kind}; }
};

}  // namespace maf_sandbox::acas
