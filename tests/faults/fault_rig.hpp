// One acas-emulator for a fault test, the switch for its injected faults (PUT /admin/faults), the
// AcasBackend configuration that reaches it, and the group's sandboxes as the emulator lists them.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "../emulator/emulator_fixture.hpp"
#include "maf_sandbox/acas/backend.hpp"

namespace maf_sandbox::emulator::testing {

class FaultRig {
  public:
    FaultRig() : emulator_(dir_.path()), sdk_(io_, dir_.path() / "ca.pem", emulator_.base_url()) {}
    // Sandboxes outlive the emulator: with the faults off, every sandbox is deleted, and one a case
    // left Deleting is waited for, before the emulator stops.
    ~FaultRig() {
        try {
            clear_faults();
            sdk_.delete_all();
        } catch (const std::exception& e) {
            ADD_FAILURE() << "cleaning up the fault rig's sandboxes: " << e.what();
        }
    }
    FaultRig(const FaultRig&) = delete;
    FaultRig& operator=(const FaultRig&) = delete;

    void set_faults(const json::object& faults) {
        const auto r = sdk_.raw("PUT", "/admin/faults", json::serialize(faults));
        ASSERT_EQ(r.status, 200) << r.body;
    }
    void clear_faults() { set_faults({}); }

    // The emulator's group and trust, with deadlines short enough for a test and the retries of a
    // well-behaved client. A case that needs longer deadlines sets them on the copy.
    acas::AcasSandboxConfig config() const {
        acas::AcasSandboxConfig c;
        c.endpoint = emulator_.base_url();
        c.subscription_id = "00000000-0000-0000-0000-000000000000";
        c.resource_group = "rg-test";
        c.sandbox_group = "group-test";
        c.ca_file = (dir_.path() / "ca.pem").string();
        c.token = "test-token";
        c.emulator = true;
        c.poll_interval = Seconds{0.1};
        c.create_timeout = Seconds{20.0};
        c.delete_timeout = Seconds{10.0};
        c.resume_timeout = Seconds{10.0};
        c.probe_timeout = Seconds{10.0};
        c.read_timeout = Seconds{10.0};
        c.client_wait = Seconds{10.0};
        c.retry.initial_backoff = Seconds{0.05};
        c.retry.max_backoff = Seconds{0.2};
        c.silence_preview_warning = true;
        return c;
    }

    // The group's sandboxes as the emulator lists them (faults must be off).
    std::vector<json::object> sandboxes() {
        std::vector<json::object> found;
        const auto r = sdk_.call("GET", "/sandboxes");
        EXPECT_EQ(r.status, 200) << r.body;
        if (r.status == 200) {
            const auto listing = SdkClient::body(r);  // named: the loop borrows from it
            for (const auto& s : listing.at("value").as_array()) {
                found.push_back(s.as_object());
            }
        }
        return found;
    }

    boost::asio::io_context& io() { return io_; }
    SdkClient& sdk() { return sdk_; }
    const std::filesystem::path& dir() const { return dir_.path(); }
    std::string endpoint() const { return emulator_.base_url(); }

  private:
    TempDir dir_;
    boost::asio::io_context io_;
    EmulatorProcess emulator_;
    SdkClient sdk_;
};

}  // namespace maf_sandbox::emulator::testing
