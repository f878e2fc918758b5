// The emulator's request routing as a pure function: an HTTP method and an origin-form target map
// to the endpoint that serves them, with no state, no I/O and no Beast. It is the emulator's one
// router (router.cpp acts on its answer), so a fuzz target and unit tests
// exercise exactly what the emulator serves; route names come from one fixed table, never from
// request text, so logs and the /metrics label set stay bounded whatever a client sends.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace maf_sandbox::emulator {

enum class Endpoint {
    invalid_target,  // 400: not an origin-form target
    healthz,
    metrics,
    admin_faults,  // GET or PUT /admin/faults (other methods answer 405); not the data plane
    not_found,     // 404: outside the data plane, or no data-plane route matches
    sandboxes_list,
    sandboxes_create,
    sandbox_get,
    sandbox_delete,
    sandbox_stop,
    sandbox_resume,
    sandbox_execute,
    sandbox_lifecycle,
    sandbox_egress_policy,
    files_read,
    files_write,
    files_delete,
    files_stat,
    files_list,
    files_mkdir,
    disk_images_list,
    disk_images_create,
    public_images_list,
    public_image_get,
    disk_image_get,
    disk_image_delete,
};

struct Route {
    Endpoint endpoint = Endpoint::not_found;
    // Under /subscriptions/{s}/resourceGroups/{g}/sandboxGroups/{n}: faults, authentication and
    // the api-version check apply before the endpoint (even when it is not_found).
    bool data_plane = false;
    std::string group;       // that prefix, segments decoded, as sent (case kept)
    std::string sandbox_id;  // decoded; set for the sandbox and files endpoints
    std::string image;       // decoded; set for disk_image_get/delete and public_image_get
    std::map<std::string, std::string> query;  // decoded; a repeated key keeps the last value
    // The decoded segments after the group prefix (data plane only): what --fault-only matches.
    std::vector<std::string> rest;
};

// Never throws for any input; an unparseable target is Endpoint::invalid_target.
Route route_request(std::string_view method, std::string_view target);

// The route's name in logs and metrics ("sandboxes.list", "files.stat", "unknown", ...): one of
// a fixed set, whatever the request held.
std::string_view route_name(Endpoint endpoint);

}  // namespace maf_sandbox::emulator
