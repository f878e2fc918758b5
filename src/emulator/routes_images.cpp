// Disk images (list, create, get, delete) and the public catalogue (list, get).
#include <fmt/format.h>

#include <boost/json/array.hpp>

#include "disk_image_state.hpp"
#include "field_support.hpp"
#include "request_values.hpp"
#include "routes.hpp"
#include "wire_format.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
using net::HttpResponse;

namespace {

json::object public_image_json(const PublicImage& image) {
    return json::object{
        {"name", image.name},
        {"id", image.name},
        {"status", json::object{{"state", wire_name(DiskImageState::ready)}}},
        {"description", fmt::format("local image '{}' (acas-emulator)", image.local_image)},
        {"tags", json::object{}}};
}

HttpResponse create_disk_image(const RouteContext& context) {
    const auto body = parse_object_body(context.request().body, false);
    refuse_unsupported_disk_image_fields(body);
    NewDiskImage request;
    request.group = context.group;
    if (const auto* image = body.if_contains("image"); image != nullptr && !image->is_null()) {
        if (!image->is_object()) {
            throw invalid_body("'image' must be an object with a 'base' reference.");
        }
        const auto* b = image->as_object().if_contains("base");
        if (b != nullptr && !b->is_null() && !b->is_string()) {
            throw invalid_body("'image.base' must be a string.");
        }
        request.base = string_field(image->as_object(), "base");
    }
    if (const auto* n = body.if_contains("name");
        n != nullptr && !n->is_null() && !n->is_string()) {
        throw invalid_body("'name' must be a string.");
    }
    if (request.base.empty()) {
        throw invalid_body("'image.base' is required.");
    }
    request.labels = parse_labels(body);
    // The "name" label names the image, as on the service; the body's name is the fallback.
    request.name = request.labels.count("name") ? request.labels["name"] : std::string();
    if (request.name.empty()) {
        request.name = string_field(body, "name");
    }
    return json_response(201, context.service.create_disk_image(request).to_wire());
}

}  // namespace

HttpResponse serve_images(const RouteContext& context) {
    auto& service = context.service;
    const auto& route = context.route();
    switch (route.endpoint) {
        case Endpoint::disk_images_list: {
            json::array value;
            for (const auto& image : service.disk_images(context.group)) {
                value.push_back(image.to_wire());
            }
            return json_response(200, json::object{{"value", std::move(value)}});
        }
        case Endpoint::disk_images_create:
            return create_disk_image(context);
        case Endpoint::public_images_list: {
            json::array value;
            for (const auto& image : service.public_images()) {
                value.push_back(public_image_json(image));
            }
            return json_response(200, json::object{{"value", std::move(value)}});
        }
        case Endpoint::public_image_get:
            return json_response(200, public_image_json(service.public_image(route.image)));
        case Endpoint::disk_image_get:
            return json_response(200, service.disk_image(context.group, route.image).to_wire());
        case Endpoint::disk_image_delete:
            service.delete_disk_image(context.group, route.image);
            return empty_response(202);
        default:
            throw no_such_route();
    }
}

}  // namespace maf_sandbox::emulator
