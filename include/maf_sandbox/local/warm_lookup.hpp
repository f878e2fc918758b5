// Finding the live sandbox of a key in the registry. LocalBackend and the CLI's lean front end
// both use this, so they serialise on the same cross-process lock and agree on which sandbox
// belongs to a key.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"

namespace maf_sandbox::local {

using Labels = std::map<std::string, std::string>;

// Pre-built sandboxes are records labelled maf-pool=<signature> (and nothing else).
inline constexpr const char* kPoolLabel = "maf-pool";

// The registry lock that serialises get-or-create for one key and kind (labels from
// sandbox_labels: scope, thread, agent, kind and, when set, call).
std::string acquire_lock_name(const Labels& labels);

// True when a record carries the same identity labels (scope, thread, agent, kind, call; a record
// with a call label never matches labels without one, and the other way round).
bool same_identity(const Labels& record_labels, const Labels& wanted);

// How to reach a recorded sandbox; nullopt for a record whose create never finished.
std::optional<runtime::SandboxHandle> handle_of(const runtime::SandboxRecord& record);
bool record_alive(const runtime::SandboxRecord& record);

// The egress policy a record was created with (records written before the policy was stored:
// their egress fields).
runtime::EgressPolicy held_egress_policy(const runtime::SandboxRecord& record);

// (perf) The key index: <state>/keys/<hash of the lock name> is a symbolic link naming the id of
// the key's sandbox, so finding a conversation's sandbox reads one link and one record instead of
// every record (a warm exec among 300 idle sandboxes cost twice one among one). It is only a
// hint: what it names is checked (record present, same identity, alive) and a scan of every
// record is the fallback. Call-scoped sandboxes are never looked up, so never indexed.
void index_key(const runtime::Registry& registry, const Labels& labels, const std::string& id);
// Removes the key's index entry if it names `id` (a sandbox being destroyed).
void unindex_key(const runtime::Registry& registry, const Labels& labels, const std::string& id);

// Tears one sandbox down and forgets it (its index entry too). Never throws; returns why it failed.
std::optional<std::string> destroy_recorded(runtime::Registry& registry,
                                            const runtime::SandboxRecord& record);

// Ends every guest process of a sandbox now: SIGKILL to its PID 1 (checked by start time), which
// takes its whole PID namespace with it. Processes a sandbox runs outside that namespace (the
// egress proxy, slirp4netns) and the cgroups, mounts and directory stay for destroy_recorded.
// False when the supervisor was already gone.
bool kill_recorded(const runtime::SandboxRecord& record);

// Records that a sandbox is being used (its record's last_used_at), at most once a minute: the
// field is informational (the supervisor enforces the idle timeout from its own activity), and a
// record rewrite costs most of a millisecond on a journaling file system, on every warm exec.
void note_use(runtime::Registry& registry, runtime::SandboxRecord& record);

// The live sandbox with these identity labels, if any. Dead or expired ones met on the way are
// destroyed (lazy reconcile). Call it holding registry.lock(acquire_lock_name(labels)). `lost`,
// when given, receives the ids of those that had been running and died before their lifecycle
// expired (a killed or crashed supervisor): their state is gone and the caller must be told.
std::optional<runtime::SandboxRecord> find_warm(runtime::Registry& registry, const Labels& labels,
                                                std::vector<std::string>* lost = nullptr);

// As find_warm, without the lock and without destroying anything: the first live sandbox with
// these identity labels, for a caller that only uses it (a dead or half-made one is left to the
// next locked acquire, which reconciles).
std::optional<runtime::SandboxRecord> find_live(const runtime::Registry& registry,
                                                const Labels& labels);

// Takes a live pooled sandbox of `signature` and relabels it with `labels`, under the pool's
// registry lock, so two processes never take the same one; nullopt when there is none. Dead ones
// met on the way are destroyed. With an `owner` (a one-shot run), the same record update names it:
// the sandbox's owner watch then disposes it when the owner ends (runtime/wire/owner.hpp).
std::optional<runtime::SandboxRecord> take_pooled(
    runtime::Registry& registry, const std::string& signature, const Labels& labels,
    const std::optional<runtime::SandboxOwner>& owner = std::nullopt);

}  // namespace maf_sandbox::local
