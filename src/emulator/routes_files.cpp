// The file plane's routes: read, write, delete, stat, list and mkdir of one path in a Running
// sandbox. A relative path names what a command run from the working directory sees.
#include <charconv>

#include "field_support.hpp"
#include "guest_path.hpp"
#include "request_values.hpp"
#include "routes.hpp"
#include "wire_format.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
using net::HttpResponse;

namespace {

// A file read, sent as the server's streamed body: one piece in memory at a time.
class StreamedFile : public net::BodyStream {
  public:
    explicit StreamedFile(std::unique_ptr<FileStream> file) : file_(std::move(file)) {}
    std::uint64_t size() const override { return file_->size(); }
    Task<std::string_view> next() override { return file_->next(); }

  private:
    std::unique_ptr<FileStream> file_;
};

std::string path_param(const RouteContext& context) {
    auto p = context.query("path");
    if (!p || p->empty()) {
        throw invalid_body("The 'path' query parameter is required.");
    }
    return resolve_guest_path(*p);
}

std::optional<mode_t> mode_param(const RouteContext& context) {
    auto text = context.query("mode");
    if (!text || text->empty()) {
        return std::nullopt;
    }
    unsigned value = 0;
    auto [p, ec] = std::from_chars(text->data(), text->data() + text->size(), value, 8);
    if (ec != std::errc{} || value > 07777) {
        throw Refusal{400, "InvalidMode", "mode must be octal permission bits."};
    }
    return static_cast<mode_t>(value);
}

}  // namespace

Task<HttpResponse> serve_files(const RouteContext& context) {
    auto& service = context.service;
    // The sandbox is checked (404, 409) before the request's parameters, as the service does.
    auto target = service.file_target(context.id());
    if (context.query("containerName")) {
        throw Refusal{400, kFieldNotSupported,
                      "'containerName' is not implemented by acas-emulator (a sandbox has one "
                      "container); remove the query parameter"};
    }
    switch (context.route().endpoint) {
        case Endpoint::files_read: {
            auto path = path_param(context);
            auto file = co_await service.read_file(std::move(target), std::move(path));
            HttpResponse r;
            r.headers.set("Content-Type", "application/octet-stream");
            r.body_stream = std::make_shared<StreamedFile>(std::move(file));
            co_return r;
        }
        case Endpoint::files_write: {
            auto path = path_param(context);
            const bool create_dirs = truthy(context.query("createDirs"), true);
            const auto mode = mode_param(context);
            auto content = context.request().body;
            const bool budgeted = context.request().admission != nullptr;
            co_await service.write_file(std::move(target), std::move(path), std::move(content),
                                        create_dirs, mode, budgeted);
            co_return json_response(200, json::object{});
        }
        case Endpoint::files_delete: {
            auto path = path_param(context);
            const bool recursive = truthy(context.query("recursive"), false);
            co_await service.remove_path(std::move(target), std::move(path), recursive);
            co_return empty_response(204);
        }
        case Endpoint::files_stat: {
            auto path = path_param(context);
            const auto entry = co_await service.stat_path(std::move(target), std::move(path));
            co_return json_response(200, entry);
        }
        case Endpoint::files_list: {
            auto path = path_param(context);
            auto listing = co_await service.list_directory(std::move(target), std::move(path));
            HttpResponse r;
            r.headers.set("Content-Type", "application/json; charset=utf-8");
            r.body = std::move(listing);
            co_return r;
        }
        case Endpoint::files_mkdir: {
            const auto body = parse_object_body(context.request().body, false);
            refuse_unknown_fields(body, {"path"}, "the files/mkdir body");
            const auto given = string_field(body, "path");
            if (given.empty()) {
                throw invalid_body("'path' is required.");
            }
            auto path = resolve_guest_path(given);
            co_await service.make_directory(std::move(target), std::move(path));
            co_return json_response(200, json::object{});
        }
        default:
            throw no_such_route();
    }
}

}  // namespace maf_sandbox::emulator
