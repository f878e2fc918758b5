// The conformance suite as a library (docs/protocol.md 6): the FILES_OUT, FILES_IN, EXEC,
// FILES_DELETE and EGRESS suites, runnable against any backend through a ConformanceSubject. Each
// probe is one behaviour a backend must have, named as in the protocol, with a sentence saying why
// it is there.
//
// Runner semantics: a subject that lacks the suite's gate capability is refused (InvalidArgument),
// never skipped into a hollow success; a probe needing a capability the subject lacks is skipped
// with the reason; a failed check or any exception becomes that probe's failure text; every probe
// runs even after others fail. The assert_* variants throw ConformanceFailure when any probe
// failed and otherwise return the results (skips included).
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/in_process.hpp"
#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

// --- Subjects ------------------------------------------------------------------------------------

// What a suite runs against: a sandbox, the absolute working directory the probes use, the
// capabilities the backend really declares, and a way to plant fixtures (natively where the
// subject can, otherwise through the sandbox).
class ConformanceSubject {
  public:
    virtual ~ConformanceSubject() = default;
    virtual Sandbox& sandbox() = 0;
    virtual std::string working_directory() const = 0;
    virtual std::set<Capability> capabilities() const = 0;
    // Writes `bytes` at an absolute guest path, creating parents.
    virtual Task<void> plant_file(std::string absolute_path, std::string bytes) = 0;
    // Creates (or replaces) a link at an absolute guest path pointing at `target`.
    virtual Task<void> plant_symlink(std::string absolute_path, std::string target) = 0;
};

// Plants through the sandbox itself: files with write_file (working directory = the file's
// parent), links with `ln -sfn` over exec (a non-zero exit throws Error).
class PosixGuestSubject : public ConformanceSubject {
  public:
    PosixGuestSubject(std::shared_ptr<Sandbox> sandbox, std::string working_directory,
                      std::set<Capability> capabilities, Seconds exec_timeout = Seconds{60.0});

    Sandbox& sandbox() override { return *sandbox_; }
    std::string working_directory() const override { return working_directory_; }
    std::set<Capability> capabilities() const override { return capabilities_; }
    Task<void> plant_file(std::string absolute_path, std::string bytes) override;
    Task<void> plant_symlink(std::string absolute_path, std::string target) override;

  private:
    std::shared_ptr<Sandbox> sandbox_;
    std::string working_directory_;
    std::set<Capability> capabilities_;
    Seconds exec_timeout_;
};

// Plants straight into an InProcessSandbox's stores. A link gets no target (the fake cannot model
// one), which is enough for the refusal probes: the walk refuses before anything would follow it.
class InProcessSubject : public ConformanceSubject {
  public:
    InProcessSubject(std::shared_ptr<InProcessSandbox> sandbox, std::string working_directory,
                     std::set<Capability> capabilities);

    Sandbox& sandbox() override { return *sandbox_; }
    std::string working_directory() const override { return working_directory_; }
    std::set<Capability> capabilities() const override { return capabilities_; }
    Task<void> plant_file(std::string absolute_path, std::string bytes) override;
    Task<void> plant_symlink(std::string absolute_path, std::string target) override;

  private:
    std::shared_ptr<InProcessSandbox> sandbox_;
    std::string working_directory_;
    std::set<Capability> capabilities_;
};

// --- The layout the probes share -----------------------------------------------------------------

struct ConformancePaths {
    std::string work;                    // normpath(working directory)
    std::string outside;                 // work + "-outside": a sibling sharing work's prefix
    std::string secret;                  // outside/secret.txt
    std::string nested_secret;           // outside/sub/leaf.txt
    std::string inside;                  // work/real/inside.txt
    std::string plain;                   // work/plain.txt
    std::string linked_directory;        // work/link-dir (-> outside)
    std::string under_linked_directory;  // work/link-dir/sub
    std::string linked_file;             // work/link-file (-> outside/secret.txt)

    static ConformancePaths under(std::string_view working_directory);
    // outside/name spelled relative to work ("../work-outside/name").
    std::string beyond(std::string_view name) const;
};

inline constexpr std::string_view kInsidePayload = "a legitimate output\n";
inline constexpr std::string_view kSecretPayload = "the guest must not reach this\n";
inline constexpr std::string_view kPlainPayload = "not a directory\n";
inline constexpr std::uint64_t kProbeReadCap = kMiB;
// UTF-8 of "ünïcödé→payload" followed by the bytes 0x01..0x7F.
std::string binary_payload();

// Plants the FILES_OUT layout: inside, plain, secret, nested secret, link-dir -> outside and
// link-file -> outside/secret.txt.
Task<void> plant_layout(ConformanceSubject& subject);

// --- Probes and results --------------------------------------------------------------------------

enum class ProbeStatus { passed, failed, skipped };
std::string_view to_string(ProbeStatus status);

struct ProbeResult {
    std::string suite;  // "FILES_OUT", "FILES_IN", "EXEC", "FILES_DELETE", "EGRESS"
    std::string name;
    ProbeStatus status = ProbeStatus::passed;
    std::string detail;  // the failure, or why it was skipped; empty on a pass
    std::string why;     // why the probe is in the suite
};

struct EgressUrls {
    std::string allowed_url;  // must answer 2xx when reachable
    std::string denied_url;   // must not be reachable from the guest
};

// What a probe body sees.
struct ProbeContext {
    ConformanceSubject& subject;
    ConformancePaths paths;
    Seconds exec_timeout{60.0};
    std::optional<EgressUrls> egress;
};

using ProbeBody = Task<void> (*)(ProbeContext& context);

struct ConformanceProbe {
    std::string name;
    std::set<Capability> requires_capabilities;
    std::string why;
    ProbeBody body = nullptr;
};

// The suites' names and probes, in the order they run.
inline constexpr std::string_view kFilesOutSuite = "FILES_OUT";
inline constexpr std::string_view kFilesInSuite = "FILES_IN";
inline constexpr std::string_view kExecSuite = "EXEC";
inline constexpr std::string_view kFilesDeleteSuite = "FILES_DELETE";
inline constexpr std::string_view kEgressSuite = "EGRESS";

const std::vector<ConformanceProbe>& files_out_probes();
const std::vector<ConformanceProbe>& files_in_probes();
const std::vector<ConformanceProbe>& exec_probes();  // the timeout probe is last
const std::vector<ConformanceProbe>& files_delete_probes();
const std::vector<ConformanceProbe>& egress_probes();

// --- Running -------------------------------------------------------------------------------------

Task<std::vector<ProbeResult>> run_files_out_conformance(ConformanceSubject& subject);
Task<std::vector<ProbeResult>> run_files_in_conformance(ConformanceSubject& subject);
Task<std::vector<ProbeResult>> run_exec_conformance(ConformanceSubject& subject);
Task<std::vector<ProbeResult>> run_files_delete_conformance(ConformanceSubject& subject);
// Gate EXEC. The subject must have been acquired with egress allowlist admitting the allowed host.
Task<std::vector<ProbeResult>> run_egress_conformance(ConformanceSubject& subject, EgressUrls urls,
                                                      Seconds exec_timeout = Seconds{30.0});

Task<std::vector<ProbeResult>> assert_files_out_conformance(ConformanceSubject& subject);
Task<std::vector<ProbeResult>> assert_files_in_conformance(ConformanceSubject& subject);
Task<std::vector<ProbeResult>> assert_exec_conformance(ConformanceSubject& subject);
Task<std::vector<ProbeResult>> assert_files_delete_conformance(ConformanceSubject& subject);
Task<std::vector<ProbeResult>> assert_egress_conformance(ConformanceSubject& subject,
                                                         EgressUrls urls,
                                                         Seconds exec_timeout = Seconds{30.0});

// Runs the ten FILES_DELETE probes with no gate, no capability skips and no verdict, for a backend
// that implements removal without declaring it.
Task<std::vector<ProbeResult>> measure_files_delete_probes(ConformanceSubject& subject);

// Runs every suite in order FILES_OUT, FILES_IN, FILES_DELETE, EGRESS, EXEC (EXEC last because its
// timeout probe may cost the sandbox on backends that discard one on timeout). A suite whose gate
// `declarations` do not declare is reported probe by probe as skipped; so is EGRESS when no URLs
// are given or the backend does not enforce allowlist egress.
Task<std::vector<ProbeResult>> run_declared_suites(ConformanceSubject& subject,
                                                   const BackendDeclarations& declarations,
                                                   std::optional<EgressUrls> egress_urls = {});

// Throws ConformanceFailure when any result failed (message: "<k> of <n> <SUITE> conformance
// probes failed:" then each failure with why it is in the suite); otherwise returns `results`.
std::vector<ProbeResult> require_no_failures(std::string_view suite,
                                             std::vector<ProbeResult> results);

}  // namespace maf_sandbox
