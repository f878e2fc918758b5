// `run --in HOST[:GUEST]`, `--out GUESTPATH` and `--out-dir DIR`: how their values are read, and
// every check that can be made before a sandbox exists, so that a run whose files have nowhere to
// come from or go to fails (125) before its command runs, not after with the result lost.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace maf_sandbox::cli {

struct InputTransfer {
    std::string value;  // the --in value, for messages
    std::string host;   // the host file, as given
    std::string guest;  // where it lands in the sandbox
};

// HOST[:GUEST], split at the LAST ':' so that a guest path never needs a colon escaped and a host
// path may hold colons: `a:b:/in/c` is host `a:b` to guest `/in/c`. A value ending in ':' is a
// host path whole (`a:b:` is host `a:b`); without a GUEST the file lands under the host file's
// base name. Throws InvalidArgument for an empty host or guest.
InputTransfer parse_input(const std::string& value);

// The host file's bytes, read in full with every read checked. A directory is refused (--in copies
// one file; the message says how to pass a tree), as is anything over `max_bytes`. Throws
// InvalidArgument naming the path and the reason.
std::string read_host_input(const InputTransfer& input, std::uint64_t max_bytes);

struct OutputTransfer {
    std::string guest;  // as given to --out
    std::string name;   // the base name it lands under in --out-dir
};

// One landing name per --out: its base name. Two that would land on one file (the same name, or
// names that differ only in ASCII letter case, which case-insensitive host file systems merge) are
// refused with InvalidArgument, as is a path with no base name.
std::vector<OutputTransfer> plan_outputs(const std::vector<std::string>& outputs);

// --out-dir must already be a directory this process can write: a missing or read-only one is
// refused (InvalidArgument naming it and the reason) before anything runs.
void require_out_dir(const std::filesystem::path& out_dir);

// Lands one output under --out-dir (land_bytes_beneath: atomic, descriptor-relative, no link
// followed). A failure is rethrown as SandboxOutputError naming the guest path, the host path and
// the reason; no partial file is left under the name.
void land_output(const std::filesystem::path& out_dir, const OutputTransfer& output,
                 std::string_view bytes);

}  // namespace maf_sandbox::cli
