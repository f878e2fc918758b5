// The two image namespaces (README "Two image namespaces"): a bare catalogue name boots a
// prebuilt image; `repo:tag` is qualified by the registry and resolved among imported disk images.
#pragma once

#include <string>
#include <string_view>

namespace maf_sandbox::acas::images {

// Non-empty, no '/', no ':', no '@': "python-3.13" yes; "bicep:0.46.1", "a/b", "x@sha256:..." no.
bool names_a_prebuilt_image(std::string_view image);

// Prefixes `registry` unless the first path segment already names one (holds '.' or ':' or is
// localhost, and a '/' follows) or no registry is configured. A trailing '/' on the registry
// never doubles.
std::string qualify(std::string_view image, std::string_view registry);

}  // namespace maf_sandbox::acas::images
