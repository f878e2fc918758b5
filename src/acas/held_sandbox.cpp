#include "held_sandbox.hpp"

#include <fmt/format.h>
#include <cctype>

#include "maf_sandbox/net/http.hpp"

namespace maf_sandbox::acas {

namespace {
std::string lower(std::string text) {
    for (auto& c : text)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
}
}  // namespace

EgressRecord egress_of(const SandboxSpec& spec) {
    EgressRecord record;
    record.mode = spec->egress;
    for (const auto& host : spec->egress_allow)
        record.hosts.insert(lower(host));
    if (record.mode == Egress::allowlist && record.hosts.empty())
        record.mode = Egress::closed;
    return record;
}

EgressRecord egress_of(const SandboxInfo& info) {
    EgressRecord record;
    if (net::iequals(info.egress_default_action, "Allow")) {
        record.mode = Egress::unrestricted;
        return record;
    }
    for (const auto& host : info.egress_hosts)
        record.hosts.insert(lower(host));
    record.mode = record.hosts.empty() ? Egress::closed : Egress::allowlist;
    return record;
}

std::string describe(const EgressRecord& record) {
    std::string hosts;
    for (const auto& host : record.hosts)
        hosts += (hosts.empty() ? "" : ", ") + host;
    return fmt::format("{}{}{}{}", to_string(record.mode), hosts.empty() ? "" : " [", hosts,
                       hosts.empty() ? "" : "]");
}

}  // namespace maf_sandbox::acas
