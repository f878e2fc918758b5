#include "images.hpp"

namespace maf_sandbox::acas::images {

bool names_a_prebuilt_image(std::string_view image) {
    return !image.empty() && image.find_first_of("/:@") == std::string_view::npos;
}

std::string qualify(std::string_view image, std::string_view registry) {
    while (!registry.empty() && registry.back() == '/')
        registry.remove_suffix(1);
    if (registry.empty())
        return std::string(image);
    const auto slash = image.find('/');
    if (slash != std::string_view::npos) {
        const auto first = image.substr(0, slash);
        if (first.find('.') != std::string_view::npos ||
            first.find(':') != std::string_view::npos || first == "localhost") {
            return std::string(image);
        }
    }
    return std::string(registry) + "/" + std::string(image);
}

}  // namespace maf_sandbox::acas::images
