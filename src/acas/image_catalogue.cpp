#include "image_catalogue.hpp"

#include <fmt/format.h>
#include <algorithm>

#include "images.hpp"

namespace maf_sandbox::acas {

ImageCatalogue::ImageCatalogue(std::string registry, Seconds hint_lifetime)
    : registry_(std::move(registry)),
      hint_lifetime_(std::chrono::duration_cast<SteadyClock::duration>(hint_lifetime)) {}

Task<CreateSandboxRequest> ImageCatalogue::resolve(AcasClient& client, const SandboxSpec& spec,
                                                   Deadline deadline) {
    CreateSandboxRequest request;
    if (spec->image_id) {
        request.disk_image_id = *spec->image_id;
        co_return request;
    }
    const std::string image = spec->image.value_or("ubuntu");
    if (images::names_a_prebuilt_image(image)) {
        if (!knows_prebuilt(image)) {
            auto names = co_await client.list_prebuilt_images(deadline);
            std::sort(names.begin(), names.end());
            if (std::find(names.begin(), names.end(), image) == names.end()) {
                std::string listed;
                for (const auto& n : names)
                    listed += (listed.empty() ? "" : ", ") + n;
                throw InvalidArgument(fmt::format(
                    "'{}' is not in the service's prebuilt image catalogue. It provides: {}. A "
                    "private image needs its tag (repo:tag), qualified by the configured registry",
                    image,
                    listed.empty() ? std::string("nothing - the catalogue is empty") : listed));
            }
            remember_prebuilt(image);
        }
        request.prebuilt_name = image;
        co_return request;
    }
    const auto reference = images::qualify(image, registry_);
    if (auto known = disk_image_of(reference)) {
        request.disk_image_id = std::move(*known);
        co_return request;
    }
    for (const auto& disk : co_await client.list_disk_images(deadline)) {
        if (disk.base == reference && !disk.id.empty()) {
            remember_disk_image(reference, disk.id);
            request.disk_image_id = disk.id;
            co_return request;
        }
    }
    throw InvalidArgument(fmt::format(
        "the image {} was never imported into this sandbox group; import it with `maf-sandbox "
        "images import {}` or pin spec.image_id",
        reference, image));
}

bool ImageCatalogue::knows_prebuilt(const std::string& name) const {
    std::lock_guard lock(mutex_);
    return prebuilt_.count(name) > 0;
}

void ImageCatalogue::remember_prebuilt(const std::string& name) {
    std::lock_guard lock(mutex_);
    prebuilt_.insert(name);
}

std::optional<std::string> ImageCatalogue::disk_image_of(const std::string& reference) const {
    std::lock_guard lock(mutex_);
    const auto found = disk_images_.find(reference);
    if (found == disk_images_.end())
        return std::nullopt;
    return found->second;
}

void ImageCatalogue::remember_disk_image(const std::string& reference, const std::string& id) {
    std::lock_guard lock(mutex_);
    disk_images_[reference] = id;
}

std::uint64_t ImageCatalogue::start_probe() {
    std::lock_guard lock(mutex_);
    return ++probe_generation_;
}

void ImageCatalogue::record_verdict(const std::string& image, std::uint64_t generation,
                                    bool refused) {
    if (image.empty())
        return;
    std::lock_guard lock(mutex_);
    const auto found = hints_.find(image);
    if (found != hints_.end() && found->second.generation > generation)
        return;  // a probe that started later already answered
    hints_[image] = Hint{SteadyClock::now() + hint_lifetime_, generation, refused};
}

bool ImageCatalogue::hint_refuses(const std::string& image) {
    std::lock_guard lock(mutex_);
    const auto found = hints_.find(image);
    if (found == hints_.end())
        return false;
    if (SteadyClock::now() >= found->second.expires) {
        hints_.erase(found);
        return false;
    }
    return found->second.refused;
}

std::string source_key(const CreateSandboxRequest& request) {
    return request.prebuilt_name ? "prebuilt:" + *request.prebuilt_name
                                 : "disk:" + request.disk_image_id.value_or("");
}

}  // namespace maf_sandbox::acas
