#include "call_outputs.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/json/array.hpp>
#include <cerrno>
#include <functional>
#include <system_error>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/file_transfer.hpp"
#include "maf_sandbox/core/random_id.hpp"

namespace maf_sandbox::mcp::detail {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr int kMaxCallDirectoryAttempts = 8;

std::string lower_extension(std::string_view name) {
    const auto dot = name.rfind('.');
    const auto slash = name.rfind('/');
    if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) {
        return {};
    }
    std::string extension(name.substr(dot + 1));
    std::transform(extension.begin(), extension.end(), extension.begin(), [](unsigned char c) {
        return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    });
    return extension;
}

bool has_resource_links(std::string_view protocol_version) {
    // resource_link content arrived with 2025-06-18; older clients get the URI as text.
    return protocol_version >= std::string_view("2025-06-18");
}

}  // namespace

std::string media_type_for(std::string_view name) {
    static const std::pair<const char*, const char*> kTypes[] = {
        {"png", "image/png"},         {"jpg", "image/jpeg"},
        {"jpeg", "image/jpeg"},       {"gif", "image/gif"},
        {"webp", "image/webp"},       {"svg", "image/svg+xml"},
        {"csv", "text/csv"},          {"tsv", "text/tab-separated-values"},
        {"txt", "text/plain"},        {"log", "text/plain"},
        {"md", "text/markdown"},      {"html", "text/html"},
        {"json", "application/json"}, {"pdf", "application/pdf"},
        {"zip", "application/zip"}};
    const auto extension = lower_extension(name);
    for (const auto& [ext, type] : kTypes) {
        if (extension == ext) {
            return type;
        }
    }
    return "application/octet-stream";
}

bool is_inline_image_type(std::string_view media_type) {
    return media_type == "image/png" || media_type == "image/jpeg" || media_type == "image/gif" ||
           media_type == "image/webp" || media_type == "image/svg+xml";
}

std::string landing_segment(std::string_view session_id) {
    const bool plain = !session_id.empty() && session_id.size() <= 64 &&
                       std::all_of(session_id.begin(), session_id.end(), [](char c) {
                           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                  (c >= '0' && c <= '9') || c == '-' || c == '_';
                       });
    if (plain) {
        return std::string(session_id);
    }
    return fmt::format("session-{:016x}", std::hash<std::string_view>{}(session_id));
}

CallOutputs::CallOutputs(CallOutputsOptions options, std::shared_ptr<SessionResources> resources)
    : options_(std::move(options)), resources_(std::move(resources)) {}

OutputSink CallOutputs::sink() {
    // The lambda only forwards; the coroutine holds the collector alive while it runs.
    auto deliver = [self = shared_from_this()](Artifact artifact) {
        return self->deliver(std::move(artifact));
    };
    return OutputSink{std::move(deliver), NameNormalization::nfc};
}

// A directory of this call's own: a fresh random name is made with mkdir, which fails on an
// existing one, so no two calls (of this server or another sharing the out-dir) land in one.
fs::path CallOutputs::call_directory() {
    if (call_directory_) {
        return *call_directory_;
    }
    const auto session_directory = *options_.out_dir / landing_segment(options_.session_id);
    std::error_code error;
    fs::create_directories(session_directory, error);
    if (error) {
        throw SandboxOutputError(
            fmt::format("could not create the session's landing directory: {}", error.message()));
    }
    for (int attempt = 0; attempt < kMaxCallDirectoryAttempts; ++attempt) {
        auto segment = random_hex(6);
        const auto candidate = session_directory / segment;
        if (::mkdir(candidate.c_str(), 0755) == 0) {
            call_segment_ = std::move(segment);
            call_directory_ = candidate;
            return candidate;
        }
        if (errno != EEXIST) {
            throw SandboxOutputError(
                fmt::format("could not create the call's landing directory: {}",
                            std::error_code(errno, std::generic_category()).message()));
        }
    }
    throw SandboxOutputError("could not find a fresh name for the call's landing directory");
}

Task<LandedArtifact> CallOutputs::deliver(Artifact artifact) {
    auto self = shared_from_this();
    Delivered delivered;
    delivered.name = artifact.name;
    delivered.mime_type = artifact.media_type.value_or(media_type_for(artifact.name));
    delivered.size = artifact.content.size();
    std::optional<std::string> handle;
    if (options_.out_dir) {
        const auto destination =
            land_bytes_beneath(call_directory(), artifact.name, artifact.content);
        delivered.landed_as = fmt::format("{}/{}/{}", landing_segment(options_.session_id),
                                          call_segment_, artifact.name);
        handle = destination.string();
    }
    if (is_inline_image_type(delivered.mime_type) &&
        artifact.content.size() <= options_.max_inline_image_bytes) {
        delivered.inline_data = base64_encode(artifact.content);
    }
    delivered.uri =
        resources_->add(artifact.name, delivered.mime_type, std::move(artifact.content));
    auto display = delivered.landed_as
                       ? fmt::format("{} ({} bytes, landed as {})", delivered.name, delivered.size,
                                     *delivered.landed_as)
                       : fmt::format("{} ({} bytes)", delivered.name, delivered.size);
    LandedArtifact landed{delivered.name, std::move(display), std::move(handle)};
    delivered_.push_back(std::move(delivered));
    co_return landed;
}

void CallOutputs::append_to(json::object& reply, std::string_view protocol_version) const {
    if (delivered_.empty()) {
        return;
    }
    auto& content = reply["content"].as_array();
    json::array structured;
    for (const auto& file : delivered_) {
        if (file.inline_data) {
            content.push_back(json::object{
                {"type", "image"}, {"data", *file.inline_data}, {"mimeType", file.mime_type}});
        }
        if (file.uri) {
            if (has_resource_links(protocol_version)) {
                content.push_back(json::object{{"type", "resource_link"},
                                               {"uri", *file.uri},
                                               {"name", file.name},
                                               {"mimeType", file.mime_type},
                                               {"size", file.size}});
            } else {
                content.push_back(
                    json::object{{"type", "text"},
                                 {"text", fmt::format("{} ({}): {} (read it with resources/read)",
                                                      file.name, file.mime_type, *file.uri)}});
            }
        }
        json::object entry{{"name", file.name}, {"mimeType", file.mime_type}, {"size", file.size}};
        if (file.uri) {
            entry["uri"] = *file.uri;
        }
        if (file.landed_as) {
            entry["landed_as"] = *file.landed_as;
        }
        structured.push_back(std::move(entry));
    }
    if (auto* structured_content = reply.if_contains("structuredContent")) {
        structured_content->as_object()["outputs"] = std::move(structured);
    }
}

}  // namespace maf_sandbox::mcp::detail
