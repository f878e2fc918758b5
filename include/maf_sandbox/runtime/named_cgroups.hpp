// Finding a sandbox's cgroups by their name alone, for callers that have no record of them (a
// creator killed before it recorded them, a host id claim whose sandbox is gone).
#pragma once

#include <string>

namespace maf_sandbox::runtime {

// Kills whatever runs in the cgroups named for sandbox `id` (maf-sbx-<id>, under every hierarchy)
// and removes them; nothing for a string that is not a sandbox id. Throws on failure.
void destroy_cgroups_named_for(const std::string& id);

}  // namespace maf_sandbox::runtime
