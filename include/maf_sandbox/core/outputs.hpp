// Output collection and landing (docs/protocol.md 5.2): a spec's declared outputs are stat-ed,
// capped, read and handed to the host's sink, in an order that refuses before it reads and reads
// before it delivers.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

inline constexpr std::size_t kMaxArtifactNameBytes = 255;

// One collected output on its way to the host: `name` is the validated delivered name.
struct Artifact {
    std::string name;
    std::string content;
    std::string kind;  // the spec's kind
    std::optional<std::string> media_type;
};

// What a sink did with an artifact. `display` is the only text a model sees; `handle` is
// host-internal (a host path, an object id) and never rendered.
struct LandedArtifact {
    std::string name;
    std::string display;
    std::optional<std::string> handle;
    bool operator==(const LandedArtifact&) const = default;
};

// How delivered names are normalised before validation and collision checks.
//
// NFC is exact for ASCII names (they are already NFC). Non-ASCII names are passed through
// unchanged for now (no Unicode normalisation library is linked), so two spellings of one accented
// name in different normalisation forms are not yet detected as a collision.
enum class NameNormalization { nfc, none };

// The host's landing place. `deliver` refuses by throwing; its exception propagates from
// collect_outputs after earlier artifacts were already delivered.
struct OutputSink {
    std::function<Task<LandedArtifact>(Artifact)> deliver;
    NameNormalization normalization = NameNormalization::nfc;
};

// Checks, in this order, each failure a SandboxArtifactNameInvalid: empty; a backslash; a leading
// `/`; a `..` segment; an empty or `.` segment (`a//b`, `a/./b`, a trailing `/`); an ASCII control
// character (0-31); invalid UTF-8; more than 255 UTF-8 bytes. Nothing else: whether a destination
// is legal is the host's business.
void validate_artifact_name(std::string_view name);

// The spec's declared outputs whose disposition is `land`, in declaration order.
std::vector<DeclaredOutput> landing_outputs(const SandboxSpec& spec);

// True when the spec lands anything: a landing declared output, or outputs named at call time.
bool spec_lands_artifacts(const SandboxSpec& spec);

// The refusal (returned, not thrown) for a spec that lands artifacts with no sink; `asked_by`
// names who asked (a tool, a kind) so the message says what to configure.
SandboxOutputSinkRequired missing_sink_refusal(const SandboxSpec& spec, std::string_view asked_by);

// Collects the spec's declared outputs plus `outputs` (named at call time) from the spec's work
// dir, in this normative order:
//  1. call-time outputs without spec.outputs_named_at_call_time: InvalidArgument;
//  2. any landing output and no sink: SandboxOutputSinkRequired;
//  3. name checks before the sandbox is touched (SandboxArtifactNameInvalid,
//     SandboxArtifactNameCollision on a case-insensitive, normalised duplicate);
//  4. stat each output in declaration order and tally spec.files_out (consumed outputs are counted
//     but never read): missing required SandboxOutputMissing, not a file SandboxOutputNotRegular,
//     unknown size SandboxOutputSizeUnknown, any cap SandboxTransferCapExceeded;
//  5-6. read each landing output with max_bytes = min(its size, the remaining total) and re-apply
//     the caps to what arrived;
//  7. deliver in order.
// Backend errors are translated: ConfinementEscape/InvalidArgument become SandboxOutputNotConfined,
// FileError SandboxOutputUnreachable (the original nested); others pass through. `sandbox` must
// outlive the returned task.
Task<std::vector<LandedArtifact>> collect_outputs(Sandbox& sandbox, SandboxSpec spec,
                                                  std::optional<OutputSink> sink = std::nullopt,
                                                  std::vector<DeclaredOutput> outputs = {});

// How a file-system sink describes a landed artifact; the default is "<name> (<N> bytes)".
using LandingDisplay =
    std::function<std::string(const Artifact& artifact, const std::filesystem::path& destination)>;

// A sink that writes each artifact under `root` with land_bytes_beneath; the handle is the
// destination path.
OutputSink make_file_system_sink(const std::filesystem::path& root, LandingDisplay display = {});

// Writes `content` as `name` (validate_artifact_name's rules) under the host directory `root`
// (created when missing; links in `root`'s own path are the host's choice and followed). Below
// `root` everything is fd-relative: parents are made with mkdirat and entered with openat2
// (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), the bytes go
// to a new O_EXCL sibling renamed over the name. A link or another mount on the way throws
// SandboxLandingNotConfined (naming no host path); other failures SandboxOutputError. Returns the
// destination's path.
std::filesystem::path land_bytes_beneath(const std::filesystem::path& root, std::string_view name,
                                         std::string_view content);

}  // namespace maf_sandbox
