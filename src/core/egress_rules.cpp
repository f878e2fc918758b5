// is_method_scoped_egress_rule (declared in router.hpp) lives apart from the router: the runtime's
// egress policy calls it inside the static maf-sandbox-supervisor, which must not pull in the
// router and, through it, spdlog (Debian ships no static spdlog).
#include <string_view>

#include "maf_sandbox/core/router.hpp"

namespace maf_sandbox {

bool is_method_scoped_egress_rule(std::string_view rule) {
    const auto first = rule.find_first_not_of(" \t");
    const auto last = rule.find_last_not_of(" \t");
    if (first == std::string_view::npos) {
        return false;
    }
    return rule.substr(first, last - first + 1).find_first_of(" \t") != std::string_view::npos;
}

}  // namespace maf_sandbox
