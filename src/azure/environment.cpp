#include <cstdlib>

#include "maf_sandbox/azure/credential.hpp"

namespace maf_sandbox::azure {

EnvironmentReader process_environment() {
    return [](std::string_view name) -> std::optional<std::string> {
        const char* value = std::getenv(std::string(name).c_str());
        if (value == nullptr || *value == '\0') {
            return std::nullopt;
        }
        return std::string(value);
    };
}

EnvironmentReader environment_from(std::map<std::string, std::string> variables) {
    return [variables = std::move(variables)](std::string_view name) -> std::optional<std::string> {
        const auto found = variables.find(std::string(name));
        if (found == variables.end() || found->second.empty()) {
            return std::nullopt;
        }
        return found->second;
    };
}

}  // namespace maf_sandbox::azure
