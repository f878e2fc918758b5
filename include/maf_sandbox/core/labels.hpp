// Labels stamped on every sandbox at create time, so disposal can find them from the service.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

inline constexpr std::size_t kMaxLabelValueLength = 63;

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
