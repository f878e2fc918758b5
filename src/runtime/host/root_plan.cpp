// The host's half of a sandbox's root: what an image asks for, as the plan the supervisor's
// prepare_root (kernel/mounts_host.cpp) builds.
#include "maf_sandbox/runtime/host/images.hpp"

namespace maf_sandbox::runtime {

RootPlan root_plan_for(const MountPlan& image, std::vector<std::string> guest_dirs) {
    RootPlan plan;
    if (!image.lower_dir.empty()) {
        plan.lower_dirs.push_back(image.lower_dir);
    }
    for (const auto& bind : image.ro_binds) {
        plan.ro_binds.push_back({bind.host_path, bind.guest_path});
    }
    plan.guest_dirs = std::move(guest_dirs);
    return plan;
}

}  // namespace maf_sandbox::runtime
