// Internal: the emulator's service, with typed requests and typed answers and no HTTP. It owns the
// state machine of sandboxes and disk images (the StateStore), every call into the engine, the
// background launches and deletions, and the lifecycle sweep. It refuses with Refusal (404 for a
// sandbox it does not have, 409 for one in the wrong state, ...); the routes (routes.hpp) turn
// requests into its calls and its answers into the wire format.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "background_work.hpp"
#include "byte_budget.hpp"
#include "engine.hpp"
#include "file_stream.hpp"
#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/emulator/emulator.hpp"
#include "registry_standin.hpp"
#include "sandbox_state.hpp"
#include "state_store.hpp"

namespace maf_sandbox::emulator {

struct ServiceOptions {
    std::filesystem::path state_dir;             // the StateStore and the registry stand-in
    std::map<std::string, std::string> aliases;  // public image name -> local image
    // How long a deleted sandbox stays listed as Deleting (EmulatorOptions::deleting_retention).
    std::chrono::milliseconds deleting_retention{2000};
    std::size_t worker_threads = 16;  // blocking engine and file-plane work
    // Extra time a new sandbox spends in Creating (a fault the operator may change at any time).
    std::function<std::uint64_t()> create_delay_ms = [] { return std::uint64_t{0}; };
    FilePlaneLimits file_limits;  // what the file plane may hold in memory
};

// A sandbox create, its body already checked (routes_sandboxes.cpp).
struct NewSandbox {
    std::string group;  // lower-cased
    std::map<std::string, std::string> labels;
    boost::json::object sources_ref;  // as sent: echoed on every answer
    std::string disk_image_id;        // sourcesRef.diskImage.id ("" when it names one by name)
    std::string disk_image_name;      // sourcesRef.diskImage.name ("" means the default)
    boost::json::object resources;    // given keys, over the defaults
    std::optional<boost::json::object> egress_policy;
    std::optional<boost::json::object> lifecycle;
    std::optional<boost::json::object> environment;
};

struct SandboxListing {
    std::string group;
    std::map<std::string, std::string> selector;  // every label must match
    std::size_t offset = 0;
    std::size_t page_size = 100;
};

struct SandboxPage {
    std::vector<SandboxDoc> sandboxes;
    std::size_t matching = 0;  // how many match in all, across pages
};

struct ShellCommand {
    std::string command;
    std::string working_directory;  // absolute, or "" for the image's default
};

struct ShellResult {
    std::string stdout_text;  // raw bytes, the truncation diagnostic appended
    std::string stderr_text;
    int exit_code = 0;
};

// A Running sandbox the file plane may act on, its activity stamp refreshed.
struct FileTarget {
    std::string id;
    boost::json::object handle;
};

struct NewDiskImage {
    std::string group;
    std::string base;  // the registry reference to import
    std::string name;
    std::map<std::string, std::string> labels;
};

struct PublicImage {
    std::string name;
    std::string local_image;
};

class SandboxService : public std::enable_shared_from_this<SandboxService> {
  public:
    // Loads the state (throws Error when it is unreadable); start() reattaches and sweeps.
    SandboxService(boost::asio::any_io_executor executor, ServiceOptions options,
                   std::shared_ptr<spdlog::logger> logger, std::unique_ptr<SandboxEngine> engine);
    ~SandboxService();
    SandboxService(const SandboxService&) = delete;
    SandboxService& operator=(const SandboxService&) = delete;

    // Settles what the state file says against what still runs, then starts the sweep.
    void start();
    // Ends the sweep; sandboxes keep running.
    void stop();

    Isolation isolation() const { return engine_->isolation(); }

    // --- sandboxes (service_sandboxes.cpp) --------------------------------------------------
    // Refuses sandbox_not_found() for a sandbox of another group: it does not exist there.
    void check_visible(const std::string& group, const std::string& id) const;
    SandboxDoc get(const std::string& id) const;
    SandboxPage list(const SandboxListing& listing) const;
    // Records the sandbox as Creating and launches it in the background.
    SandboxDoc create(const NewSandbox& request);
    // Marks it Deleting and deletes it in the background; a repeated call is accepted.
    void remove(const std::string& id);
    // Running -> Stopped, and Stopped or Suspended -> Running; the guest is frozen to match.
    Task<SandboxDoc> stop_sandbox(const std::string& id);
    Task<SandboxDoc> resume_sandbox(const std::string& id);
    // Replace the whole policy of a live sandbox; the answer is the stored policy.
    boost::json::object set_lifecycle(const std::string& id, const boost::json::object& policy);
    boost::json::object set_egress_policy(const std::string& id, const boost::json::object& policy);
    std::map<SandboxState, int> count_by_state() const;

    // --- exec and files (service_exec_files.cpp) -----------------------------------------------
    Task<ShellResult> exec(const std::string& id, ShellCommand command);
    FileTarget file_target(const std::string& id);
    // The file, to be read in pieces. Never answers for a FIFO (as the service); refuses 503
    // when the emulator shuts down, 429 when the file plane's in-flight budget stays full.
    Task<std::unique_ptr<FileStream>> read_file(FileTarget target, std::string path);
    // `budgeted`: the content's bytes were already taken from file_budget() for this request
    // (write_admission.hpp, before the server read the body), and are not taken again.
    Task<void> write_file(FileTarget target, std::string path, std::string content,
                          bool create_dirs, std::optional<mode_t> mode, bool budgeted = false);
    // What the file plane's requests hold at once.
    std::shared_ptr<ByteBudget> file_budget() const { return file_budget_; }
    Task<void> remove_path(FileTarget target, std::string path, bool recursive);
    Task<boost::json::object> stat_path(FileTarget target, std::string path);
    // The listing as JSON text; 413 ListingTooLarge past the limits' caps.
    Task<std::string> list_directory(FileTarget target, std::string path);
    Task<void> make_directory(FileTarget target, std::string path);

    // --- disk images (service_images.cpp) ------------------------------------------------------
    std::vector<DiskImageDoc> disk_images(const std::string& group) const;
    DiskImageDoc disk_image(const std::string& group, const std::string& id) const;
    // Recorded Pending; imported from the registry stand-in in the background.
    DiskImageDoc create_disk_image(const NewDiskImage& request);
    void delete_disk_image(const std::string& group, const std::string& id);
    std::vector<PublicImage> public_images() const;
    PublicImage public_image(const std::string& name) const;

  private:
    SandboxDoc require(const std::string& id) const;
    SandboxDoc require_running(const std::string& id);
    std::string resolve_image(const NewSandbox& request) const;
    boost::json::object set_policy(const std::string& id, const boost::json::object& policy,
                                   bool lifecycle);
    void spawn_launch(SandboxDoc doc);
    Task<void> launch(SandboxDoc doc);
    void spawn_delete(const std::string& id, boost::json::object handle = {});
    Task<void> destroy(std::string id, boost::json::object handle);
    void thaw_for_delete(const boost::json::object& handle);
    void apply_freeze(const std::string& id);
    Task<void> offload_freeze(const std::string& id);
    Task<void> import_disk_image(DiskImageDoc doc);
    template <typename F>
    auto with_plane(const FileTarget& target, F&& fn);

    // service_sweep.cpp
    void reattach();
    void start_sweeper();
    void sweep();
    void persist_pending();
    void resolve_stuck();

    boost::asio::any_io_executor executor_;
    ServiceOptions options_;
    std::shared_ptr<spdlog::logger> logger_;
    boost::asio::thread_pool pool_;
    StateStore store_;
    RegistryStandIn registry_;
    std::unique_ptr<SandboxEngine> engine_;
    std::map<std::string, std::string> catalogue_;  // public image name -> local image
    std::atomic<bool> stopping_{false};
    std::shared_ptr<boost::asio::steady_timer> sweeper_;
    bool state_unsaved_ = false;  // the sweep's last save failed (logged once)
    std::mutex freeze_mutex_;     // serialises freezer writes so the last state change wins
    BackgroundWork work_;         // launches and deletions in flight, for the sweep
    // Bytes the file plane's requests hold at once (options_ is initialised before it).
    std::shared_ptr<ByteBudget> file_budget_ =
        std::make_shared<ByteBudget>(options_.file_limits.in_flight_bytes);
};

}  // namespace maf_sandbox::emulator
