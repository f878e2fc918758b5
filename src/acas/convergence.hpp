// One sandbox per key across processes and replicas. The service serialises nothing between "list
// by labels" and "create", so racing acquires of a cold key each create one; afterwards each lists
// the key again and every one of them names the same winner by a rule that needs no coordination:
// the oldest createdAt, then the lowest id. The others are disposed, and their creators redirect
// to the winner before they hand anything out (docs/acas.md, "One sandbox per key").
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "maf_sandbox/acas/client.hpp"

namespace maf_sandbox::acas::convergence {

// An ISO 8601 createdAt ("2026-10-04T01:50:55.1020312+00:00", "...Z") as nanoseconds since the
// epoch in UTC; nullopt when it does not parse.
std::optional<std::int64_t> parse_created_at(std::string_view text);

// True when `a` wins over `b`: the older createdAt, then the lower id. A missing or unparsable
// createdAt loses to any parsable one (then ids decide), so every replica orders the same way.
bool wins_over(const SandboxInfo& a, const SandboxInfo& b);

// The winner among `holders`; nullopt when there are none.
std::optional<SandboxInfo> winner(const std::vector<SandboxInfo>& holders);

}  // namespace maf_sandbox::acas::convergence
