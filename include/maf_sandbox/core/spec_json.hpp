// A SandboxSpec as JSON, for front ends (`maf-sandbox check --spec`) and config files.
//
// The object's fields are SandboxSpecFields' names, snake_case, with `requires` standing for
// requires_capabilities (docs/protocol.md 2.5):
//   kind (string, required), image, image_id, work_dir (string or null), egress_allow (array of
//   strings; "METHOD host" is a method-scoped rule), labels (object of strings), requires (array
//   of capability names), min_isolation (rung or null), declared_outputs (array of objects
//   {path, disposition, media_type, required, name}; only path is required), files_in and
//   files_out (objects {max_bytes_per_file, max_total_bytes, max_files}, any subset; missing
//   members keep the default), outputs_named_at_call_time (bool), host_tools (object
//   {result_integrity, outbound_caps, identities, requires_approval, has_undeclared,
//   response_limits, max_host_tool_calls_per_run} or null), egress, requires_os_family (or null),
//   isolation_scope. Enums are their lowercase protocol strings. Missing fields keep the
//   protocol's defaults.
#pragma once

#include <string>
#include <string_view>

#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

// Parses and validates one spec. Malformed JSON, a top level that is not an object, an unknown
// field, a wrong type, an unknown enum string, a negative or fractional count and a missing
// `kind` each throw InvalidArgument with a one-line message naming the field
// ("spec field 'egress': unknown egress mode 'open'; use one of: ..."). The spec's own
// invariants (SandboxSpec's constructor) throw InvalidArgument too.
SandboxSpec parse_spec_json(std::string_view text);

// The spec as a JSON object that parse_spec_json reads back to an equal spec. Unset optional
// fields are omitted.
std::string spec_to_json(const SandboxSpec& spec);

}  // namespace maf_sandbox
