// A tiny test backend over maf_test_support's HostShellSandbox: one real-shell sandbox per
// (key, kind), isolation none (so routers over it use floor none), recording what it was asked.
// Shared by the kinds and MCP tests; never used outside tests.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "host_shell_sandbox.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::testing {

struct HostShellBackendOptions {
    std::string name = "host-shell";
    bool declare_reclaim = true;
    bool declare_exec = true;
    // When set, acquire throws it.
    std::exception_ptr acquire_error;
};

class HostShellBackend : public SandboxBackend {
  public:
    explicit HostShellBackend(HostShellBackendOptions options = {})
        : options_(std::move(options)) {}

    std::string name() const override { return options_.name; }
    Isolation isolation() const override { return Isolation::none; }
    BackendDeclarations declarations() const override {
        BackendDeclarations declared;
        declared.capabilities = {Capability::files_in, Capability::files_out,
                                 Capability::files_list, Capability::files_delete};
        if (options_.declare_exec) {
            declared.capabilities.insert(Capability::exec);
        }
        if (options_.declare_reclaim) {
            declared.capabilities.insert(Capability::reclaim);
        }
        declared.egress_modes = {Egress::closed, Egress::allowlist};
        declared.isolation_scopes = {IsolationScope::conversation, IsolationScope::call};
        return declared;
    }

    Task<std::shared_ptr<Sandbox>> acquire(SandboxKey key, SandboxSpec spec) override {
        if (options_.acquire_error) {
            std::rethrow_exception(options_.acquire_error);
        }
        acquired.emplace_back(key, spec);
        const auto identity = std::make_pair(key, spec->kind);
        auto& sandbox = live[identity];
        if (!sandbox) {
            sandbox = std::make_shared<HostShellSandbox>();
            ++created;
            if (replace_next) {
                // As a real backend does after discarding a key's sandbox.
                sandbox->mark_replaced(*replace_next);
                replace_next.reset();
            }
        }
        co_return sandbox;
    }

    Task<std::optional<DisposalFailure>> dispose(SandboxKey key,
                                                 std::optional<std::string> kind) override {
        disposed.emplace_back(key, kind);
        for (auto it = live.begin(); it != live.end();) {
            if (it->first.first == key && (!kind || it->first.second == *kind)) {
                it = live.erase(it);
            } else {
                ++it;
            }
        }
        co_return std::nullopt;
    }

    Task<ScopePurge> dispose_scope(std::string scope, std::string thread_id) override {
        purged.emplace_back(scope, thread_id);
        ScopePurge purge;
        for (auto it = live.begin(); it != live.end();) {
            if (it->first.first.scope == scope && it->first.first.thread_id == thread_id) {
                it = live.erase(it);
                ++purge.disposed;
            } else {
                ++it;
            }
        }
        co_return purge;
    }

    Task<void> close() override { co_return; }

    // Live sandboxes by (key, kind).
    std::map<std::pair<SandboxKey, std::string>, std::shared_ptr<HostShellSandbox>> live;
    std::vector<std::pair<SandboxKey, SandboxSpec>> acquired;
    std::vector<std::pair<SandboxKey, std::optional<std::string>>> disposed;
    std::vector<std::pair<std::string, std::string>> purged;
    int created = 0;
    // When set, the next sandbox created reports it (Sandbox::replaced) and it is cleared.
    std::optional<SandboxReplacement> replace_next;

  private:
    HostShellBackendOptions options_;
};

}  // namespace maf_sandbox::testing
