// JSON shapes of the ACAS data plane (docs/acas-rest-api.md section 3), built and read in one
// place.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "maf_sandbox/acas/client.hpp"

namespace maf_sandbox::acas::wire {

boost::json::object create_body(const CreateSandboxRequest& request);
boost::json::object egress_policy(const std::vector<std::string>& allow_hosts);
boost::json::object lifecycle_body(const LifecyclePolicy& policy);

SandboxInfo parse_sandbox(const boost::json::value& value);
ExecAnswer parse_exec_answer(const boost::json::value& value);
DiskImageInfo parse_disk_image(const boost::json::value& value);

struct Page {
    boost::json::array items;
    std::string next_link;
};
// A bare array, or {value, nextLink}.
Page parse_page(const boost::json::value& value);

// Refuses (AcasServiceError) a nextLink that is not https or names another host or port.
void require_same_origin(std::string_view link, std::string_view host, std::uint16_t port);

// A raw file entry: its kind from isDir/isSymlink (both required booleans, else
// AcasEntryPayloadIncomplete) and a size only for a regular file with a non-negative integer
// size.
struct RawEntry {
    std::string path;
    EntryKind kind = EntryKind::other;
    std::optional<std::uint64_t> size;
};
RawEntry parse_entry(const boost::json::value& value);

}  // namespace maf_sandbox::acas::wire
