// Labels stamped on every sandbox at create time, so disposal can find them from the service.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

inline constexpr std::size_t kMaxLabelValueLength = 63;

// The identity labels, named once: every backend stamps them, selects on them and matches them
// through this table and the functions below, never through its own spelling.
namespace identity_label {
inline constexpr std::string_view scope = "scope";
inline constexpr std::string_view thread = "thread";
inline constexpr std::string_view agent = "agent";
inline constexpr std::string_view kind = "kind";
inline constexpr std::string_view call = "call";
}  // namespace identity_label

// All of them, in the order lock and index names spell them.
inline constexpr std::array<std::string_view, 5> kIdentityLabels = {
    identity_label::scope, identity_label::thread, identity_label::agent, identity_label::kind,
    identity_label::call};

// Whether `name` is an identity label (a spec's extra labels may not use one).
bool is_identity_label(std::string_view name);

// The labels that find a key's sandboxes: scope, thread and agent, call when the key names one,
// and kind when one is given (all through label_value).
std::map<std::string, std::string> key_selector(const SandboxKey& key,
                                                const std::optional<std::string>& kind);

// Whether a sandbox's labels are selected by key_selector(key, kind): every selector label equal,
// and a conversation key (no call id) never selecting a call-scoped sandbox.
bool labels_match_key(const std::map<std::string, std::string>& labels, const SandboxKey& key,
                      const std::optional<std::string>& kind);

// A value kept verbatim when it is at most 63 characters of [A-Za-z0-9._-] and does not itself
// look like a hashed value; otherwise `sha256-` followed by the first 48 hex digits of its SHA-256.
// Never truncated.
std::string label_value(std::string_view raw);

// The identity labels of a sandbox: scope, thread, agent, kind and (when set) call, each through
// label_value, plus the spec's extra labels (also hashed where needed).
std::map<std::string, std::string> sandbox_labels(const SandboxKey& key, const SandboxSpec& spec);

// The labels selecting every sandbox of one conversation.
std::map<std::string, std::string> scope_selector(std::string_view scope,
                                                  std::string_view thread_id);

}  // namespace maf_sandbox
