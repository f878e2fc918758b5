// The file plane's host half: checks what needs no guest (the path's shape), then hands each
// operation to a guest-authority child (guest_authority.hpp) and turns its answer into the
// routes' types. Nothing here touches the guest's file system.
#include "file_plane.hpp"

#include <fmt/format.h>
#include <boost/json/parse.hpp>

#include "file_plane_inside.hpp"
#include "guest_authority.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;

namespace {

void require_absolute(std::string_view path) {
    if (path.empty() || path.front() != '/' || path.find('\0') != std::string_view::npos) {
        throw Refusal{400, "InvalidPath", fmt::format("The path '{}' must be absolute.", path)};
    }
}

GuestReply run(const GuestAuthority& authority, const std::function<void(ReplyChannel&)>& op,
               std::uint64_t max_data = 0) {
    return run_with_guest_authority(authority, op, max_data);
}

json::object parse_payload(const std::string& payload) {
    boost::system::error_code ec;
    auto value = json::parse(payload, ec);
    if (ec || !value.is_object()) {
        throw Refusal{500, "FileOperationFailed", "The file operation answered garbage."};
    }
    return std::move(value.as_object());
}

}  // namespace

ReadKind FilePlane::classify_read(std::string_view path) const {
    require_absolute(path);
    const std::string p(path);
    const auto reply = run(authority_, [&p](ReplyChannel& out) {
        out.done(inside::classify_read(p) == ReadKind::fifo ? "fifo" : "regular");
    });
    return reply.payload == "fifo" ? ReadKind::fifo : ReadKind::regular;
}

OpenedFile FilePlane::open_read(std::string_view path, std::uint64_t max_bytes) const {
    require_absolute(path);
    const std::string p(path);
    auto reply = run_with_guest_authority(
        authority_,
        [&p, max_bytes](ReplyChannel& out) { inside::open_for_read(p, max_bytes, out); }, 0, true);
    if (!reply.descriptor) {
        throw Refusal{500, "FileOperationFailed", "The file operation handed back no file."};
    }
    return OpenedFile{std::move(reply.descriptor), std::stoull(reply.payload)};
}

void FilePlane::write(std::string_view path, std::string_view content, bool create_dirs,
                      std::optional<mode_t> mode) const {
    require_absolute(path);
    const std::string p(path);
    // The content is not copied: the child shares the caller's memory.
    run(authority_, [&](ReplyChannel& out) {
        inside::write(stage_key_, p, content, create_dirs, mode);
        out.done({});
    });
}

json::object FilePlane::stat(std::string_view path) const {
    require_absolute(path);
    const std::string p(path);
    const auto reply = run(authority_, [&p](ReplyChannel& out) { out.done(inside::stat(p)); });
    return parse_payload(reply.payload);
}

std::string FilePlane::list(std::string_view path, std::uint64_t max_entries,
                            std::uint64_t max_bytes) const {
    require_absolute(path);
    const std::string p(path);
    const inside::ListCaps caps{max_entries, max_bytes};
    auto reply =
        run(authority_, [&p, &caps](ReplyChannel& out) { out.done(inside::list(p, caps)); });
    return std::move(reply.payload);
}

void FilePlane::mkdir(std::string_view path) const {
    require_absolute(path);
    const std::string p(path);
    run(authority_, [&p](ReplyChannel& out) {
        inside::mkdir(p);
        out.done({});
    });
}

void FilePlane::remove(std::string_view path, bool recursive) const {
    require_absolute(path);
    const std::string p(path);
    run(authority_, [&p, recursive](ReplyChannel& out) {
        inside::remove(p, recursive);
        out.done({});
    });
}

}  // namespace maf_sandbox::emulator
