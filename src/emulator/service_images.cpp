// SandboxService: disk images (imported in the background from the registry stand-in) and the
// public catalogue of local images a sandbox may name.
#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

#include "maf_sandbox/core/off_loop.hpp"
#include "out_of_space.hpp"
#include "refusal.hpp"
#include "sandbox_service.hpp"
#include "timer_wait.hpp"

namespace maf_sandbox::emulator {
namespace asio = boost::asio;

std::vector<DiskImageDoc> SandboxService::disk_images(const std::string& group) const {
    std::vector<DiskImageDoc> out;
    for (auto& image : store_.disk_images()) {
        if (in_group(image.group, group)) {
            out.push_back(std::move(image));
        }
    }
    return out;
}

DiskImageDoc SandboxService::disk_image(const std::string& group, const std::string& id) const {
    auto image = store_.disk_image(id);
    if (!image || !in_group(image->group, group)) {
        throw Refusal{404, "DiskImageNotFound", fmt::format("Disk image '{}' was not found.", id)};
    }
    return *image;
}

void SandboxService::delete_disk_image(const std::string& group, const std::string& id) {
    const auto image = disk_image(group, id);
    store_.erase_disk_image(id);
    if (!image.local_image.empty()) {
        auto self = shared_from_this();
        const auto local = image.local_image;
        asio::post(pool_, [self, local]() { self->engine_->remove_image(local); });
    }
}

std::vector<PublicImage> SandboxService::public_images() const {
    std::vector<PublicImage> out;
    for (const auto& [name, image] : catalogue_) {
        out.push_back(PublicImage{name, image});
    }
    return out;
}

PublicImage SandboxService::public_image(const std::string& name) const {
    auto it = catalogue_.find(name);
    if (it == catalogue_.end()) {
        throw Refusal{404, "DiskImageNotFound",
                      fmt::format("Public disk image '{}' was not found.", name)};
    }
    return PublicImage{it->first, it->second};
}

DiskImageDoc SandboxService::create_disk_image(const NewDiskImage& request) {
    DiskImageDoc doc;
    doc.id = new_guid();
    doc.group = request.group;
    doc.base = request.base;
    doc.labels = request.labels;
    doc.name = request.name;
    doc.created_at = iso_time(unix_now());
    doc.state = DiskImageState::pending;
    store_.put(doc);
    auto self = shared_from_this();
    asio::co_spawn(
        executor_, [self, doc]() -> Task<void> { co_await self->import_disk_image(doc); },
        asio::detached);
    return doc;
}

Task<void> SandboxService::import_disk_image(DiskImageDoc doc) {
    DiskImageDoc done = doc;
    const auto archive = registry_.find(doc.base);
    if (!archive) {
        done.state = DiskImageState::failed;
        done.message = fmt::format(
            "failed to pull '{}': manifest unknown. The emulator's local registry has no such "
            "reference; run `acas-emulator images add ARCHIVE --ref {}`",
            doc.base, doc.base);
    } else {
        std::string hex;
        for (char c : doc.id) {
            if (c != '-') {
                hex.push_back(c);
            }
        }
        const auto local = fmt::format("acas-img-{}:latest", hex);
        // As a launch: an import refused for want of space (the runtime's images share the
        // state disk) is tried again while the image is still wanted and within
        // kLaunchRetryWindow, staying Pending; then it fails, saying why.
        const auto first_try = std::chrono::steady_clock::now();
        for (bool retrying = false;; retrying = true) {
            bool no_space = false;
            try {
                auto self = shared_from_this();
                auto job = [self, archive, local]() {
                    self->engine_->import_image(*archive, local);
                };
                co_await off_loop(pool_, job);
                done.state = DiskImageState::ready;
                done.local_image = local;
            } catch (const std::exception& e) {
                // The reason names host paths: logged; the status says where it is.
                no_space = out_of_space(e);
                if (!retrying || !no_space) {
                    logger_->error("disk image {}: importing '{}' failed: {}", doc.id, doc.base,
                                   e.what());
                }
                done.state = DiskImageState::failed;
                done.message =
                    no_space
                        ? fmt::format(
                              "failed to import '{}': the emulator's disk has no space for it",
                              doc.base)
                        : fmt::format("failed to import '{}'; the emulator's log has the reason",
                                      doc.base);
            }
            if (!no_space || !store_.disk_image(doc.id) ||
                std::chrono::steady_clock::now() - first_try > kLaunchRetryWindow) {
                break;
            }
            co_await sleep_ms(executor_, kLaunchRetryMs);
        }
    }
    // Eventual: the sweep saves the outcome once the disk has room again.
    try {
        store_.record(done);
    } catch (const std::exception& e) {
        logger_->error("disk image {}: recording it as {} failed: {}", doc.id,
                       wire_name(done.state), e.what());
    }
    logger_->info("disk image {} ({}) is {}", doc.id, doc.base, wire_name(done.state));
}

}  // namespace maf_sandbox::emulator
