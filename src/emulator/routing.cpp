#include "routing.hpp"

#include <array>
#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>
#include <utility>
#include <vector>

namespace maf_sandbox::emulator {
namespace {

constexpr std::array<std::pair<Endpoint, std::string_view>, 26> kNames{{
    {Endpoint::invalid_target, "bad-target"},
    {Endpoint::healthz, "healthz"},
    {Endpoint::metrics, "metrics"},
    {Endpoint::admin_faults, "admin.faults"},
    {Endpoint::not_found, "unknown"},
    {Endpoint::sandboxes_list, "sandboxes.list"},
    {Endpoint::sandboxes_create, "sandboxes.create"},
    {Endpoint::sandbox_get, "sandboxes.get"},
    {Endpoint::sandbox_delete, "sandboxes.delete"},
    {Endpoint::sandbox_stop, "sandboxes.stop"},
    {Endpoint::sandbox_resume, "sandboxes.resume"},
    {Endpoint::sandbox_execute, "sandboxes.executeShellCommand"},
    {Endpoint::sandbox_lifecycle, "sandboxes.lifecycle"},
    {Endpoint::sandbox_egress_policy, "sandboxes.egresspolicy"},
    {Endpoint::files_read, "files"},
    {Endpoint::files_write, "files"},
    {Endpoint::files_delete, "files"},
    {Endpoint::files_stat, "files.stat"},
    {Endpoint::files_list, "files.list"},
    {Endpoint::files_mkdir, "files.mkdir"},
    {Endpoint::disk_images_list, "diskimages"},
    {Endpoint::disk_images_create, "diskimages"},
    {Endpoint::public_images_list, "diskimages"},
    {Endpoint::public_image_get, "diskimages"},
    {Endpoint::disk_image_get, "diskimages"},
    {Endpoint::disk_image_delete, "diskimages"},
}};

Endpoint sandbox_endpoint(std::string_view method, const std::vector<std::string>& rest) {
    if (rest.size() == 2) {
        if (method == "GET") {
            return Endpoint::sandbox_get;
        }
        if (method == "DELETE") {
            return Endpoint::sandbox_delete;
        }
    }
    if (rest.size() == 3 && method == "POST") {
        const auto& op = rest[2];
        if (op == "stop") {
            return Endpoint::sandbox_stop;
        }
        if (op == "resume") {
            return Endpoint::sandbox_resume;
        }
        if (op == "executeShellCommand") {
            return Endpoint::sandbox_execute;
        }
        if (op == "lifecycle") {
            return Endpoint::sandbox_lifecycle;
        }
        if (op == "egresspolicy") {
            return Endpoint::sandbox_egress_policy;
        }
    }
    if (rest.size() >= 3 && rest[2] == "files") {
        // Segments after the operation are ignored, as dispatch does.
        const std::string_view op = rest.size() == 3 ? std::string_view() : rest[3];
        if (op.empty() && method == "GET") {
            return Endpoint::files_read;
        }
        if (op.empty() && method == "PUT") {
            return Endpoint::files_write;
        }
        if (op.empty() && method == "DELETE") {
            return Endpoint::files_delete;
        }
        if (op == "stat" && method == "GET") {
            return Endpoint::files_stat;
        }
        if (op == "list" && method == "GET") {
            return Endpoint::files_list;
        }
        if (op == "mkdir" && method == "POST") {
            return Endpoint::files_mkdir;
        }
    }
    return Endpoint::not_found;
}

Endpoint disk_image_endpoint(std::string_view method, const std::vector<std::string>& rest,
                             std::string& image) {
    if (rest.size() == 1 && method == "GET") {
        return Endpoint::disk_images_list;
    }
    if (rest.size() == 1 && (method == "PUT" || method == "POST")) {
        return Endpoint::disk_images_create;
    }
    if (rest.size() >= 2 && rest[1] == "public" && method == "GET") {
        if (rest.size() == 3) {
            image = rest[2];
            return Endpoint::public_image_get;
        }
        return Endpoint::public_images_list;
    }
    if (rest.size() == 2 && (method == "GET" || method == "DELETE")) {
        image = rest[1];
        return method == "GET" ? Endpoint::disk_image_get : Endpoint::disk_image_delete;
    }
    return Endpoint::not_found;
}

}  // namespace

Route route_request(std::string_view method, std::string_view target) {
    Route route;
    const auto parsed = boost::urls::parse_origin_form(target);
    if (!parsed) {
        route.endpoint = Endpoint::invalid_target;
        return route;
    }
    for (const auto& param : parsed->params()) {
        route.query[std::string(param.key)] = std::string(param.value);
    }
    std::vector<std::string> segments;
    for (const auto& segment : parsed->segments()) {
        segments.emplace_back(segment);
    }
    if (segments.size() == 1 && segments[0] == "healthz") {
        route.endpoint = Endpoint::healthz;
        return route;
    }
    if (segments.size() == 1 && segments[0] == "metrics") {
        route.endpoint = Endpoint::metrics;
        return route;
    }
    if (segments.size() == 2 && segments[0] == "admin" && segments[1] == "faults") {
        route.endpoint = Endpoint::admin_faults;
        return route;
    }
    if (segments.size() < 6 || segments[0] != "subscriptions" || segments[2] != "resourceGroups" ||
        segments[4] != "sandboxGroups") {
        return route;
    }
    route.data_plane = true;
    for (std::size_t i = 0; i < 6; ++i) {
        route.group += "/" + segments[i];
    }
    route.rest.assign(segments.begin() + 6, segments.end());
    const auto& rest = route.rest;
    if (rest.size() == 1 && rest[0] == "sandboxes") {
        if (method == "GET") {
            route.endpoint = Endpoint::sandboxes_list;
            return route;
        }
        if (method == "PUT" || method == "POST") {
            route.endpoint = Endpoint::sandboxes_create;
            return route;
        }
    }
    if (rest.size() >= 2 && rest[0] == "sandboxes") {
        route.endpoint = sandbox_endpoint(method, rest);
        if (route.endpoint != Endpoint::not_found) {
            route.sandbox_id = rest[1];
            return route;
        }
    }
    if (!rest.empty() && rest[0] == "diskimages") {
        route.endpoint = disk_image_endpoint(method, rest, route.image);
    }
    return route;
}

std::string_view route_name(Endpoint endpoint) {
    for (const auto& [candidate, name] : kNames) {
        if (candidate == endpoint) {
            return name;
        }
    }
    return "unknown";
}

}  // namespace maf_sandbox::emulator
