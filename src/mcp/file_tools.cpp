#include "file_tools.hpp"

#include <fmt/format.h>

#include <boost/json/array.hpp>

#include "call_outputs.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/file_transfer.hpp"
#include "maf_sandbox/core/random_id.hpp"

namespace maf_sandbox::mcp::detail {
namespace {

namespace json = boost::json;

bool has_structured_content(std::string_view protocol_version) {
    return protocol_version >= std::string_view("2025-06-18");
}

json::object string_property(std::string description) {
    return json::object{{"type", "string"}, {"description", std::move(description)}};
}

json::object file_output_schema() {
    json::object properties;
    properties["path"] = json::object{{"type", "string"}};
    properties["guest_path"] = json::object{{"type", "string"}};
    properties["size"] = json::object{{"type", "integer"}};
    properties["error"] = json::object{{"type", "string"}};
    return json::object{{"type", "object"}, {"properties", std::move(properties)}};
}

json::object definition(std::string name, std::string title, std::string description,
                        json::object properties, json::array required, bool read_only,
                        std::string_view protocol_version) {
    json::object schema;
    schema["type"] = "object";
    schema["properties"] = std::move(properties);
    schema["required"] = std::move(required);
    schema["additionalProperties"] = false;
    json::object tool;
    tool["name"] = std::move(name);
    tool["title"] = title;
    tool["description"] = std::move(description);
    tool["inputSchema"] = std::move(schema);
    if (has_structured_content(protocol_version)) {
        tool["outputSchema"] = file_output_schema();
    }
    tool["annotations"] = json::object{{"title", std::move(title)},
                                       {"readOnlyHint", read_only},
                                       {"destructiveHint", !read_only},
                                       {"idempotentHint", true},
                                       {"openWorldHint", false}};
    return tool;
}

std::optional<InvalidParams> only(const json::object& object,
                                  std::initializer_list<std::string_view> allowed,
                                  std::string_view tool) {
    for (const auto& member : object) {
        bool known = false;
        for (auto name : allowed) {
            known = known || member.key() == name;
        }
        if (!known) {
            return InvalidParams{fmt::format("{}: unknown argument '{}'", tool,
                                             std::string_view(member.key()).substr(0, 120))};
        }
    }
    return std::nullopt;
}

}  // namespace

json::object upload_file_definition(const kinds::ConversationFiles& files,
                                    std::string_view protocol_version) {
    auto description = fmt::format(
        "Writes a file into this conversation's sandbox ({}; the one execute_code runs in), "
        "replacing a file of that name. 'path' is relative to the sandbox's work directory, the "
        "parent of each execute_code call's own working directory, so a program reads it as "
        "'../<path>' (the result gives the absolute path). Send the bytes base64-encoded in "
        "'content_base64'; files over {} bytes are refused.",
        sandbox_phrase(files.provenance(), files.spec()),
        files.spec()->files_in.max_bytes_per_file);
    json::object properties;
    properties["path"] = string_property(
        "Where to write the file, relative to the sandbox's work directory (no '..').");
    properties["content_base64"] = string_property("The file's bytes, base64-encoded.");
    return definition(kinds::kUploadToolName, "Upload a file into the sandbox",
                      std::move(description), std::move(properties),
                      json::array{"path", "content_base64"}, false, protocol_version);
}

json::object download_file_definition(const kinds::ConversationFiles& files,
                                      std::string_view protocol_version) {
    auto description = fmt::format(
        "Reads a file from this conversation's sandbox ({}; the one execute_code runs in) and "
        "returns its bytes as an embedded resource (base64 'blob'). 'path' is relative to the "
        "sandbox's work directory, the parent of each execute_code call's own working directory "
        "(which is removed after the call: to keep a file, write it to '../<name>'). Links are "
        "not followed; files over {} bytes are refused.",
        sandbox_phrase(files.provenance(), files.spec()),
        files.spec()->files_out.max_bytes_per_file);
    json::object properties;
    properties["path"] =
        string_property("The file to read, relative to the sandbox's work directory (no '..').");
    return definition(kinds::kDownloadToolName, "Download a file from the sandbox",
                      std::move(description), std::move(properties), json::array{"path"}, true,
                      protocol_version);
}

std::variant<UploadArguments, InvalidParams> parse_upload_file(const json::value* arguments) {
    if (arguments == nullptr || !arguments->is_object()) {
        return InvalidParams{
            "upload_file needs an arguments object with 'path' and "
            "'content_base64'"};
    }
    const auto& object = arguments->get_object();
    if (auto unknown = only(object, {"path", "content_base64"}, "upload_file")) {
        return *unknown;
    }
    const auto* path = object.if_contains("path");
    const auto* content = object.if_contains("content_base64");
    if (path == nullptr || !path->is_string() || content == nullptr || !content->is_string()) {
        return InvalidParams{"upload_file needs 'path' and 'content_base64' as strings"};
    }
    UploadArguments parsed;
    parsed.path = std::string(path->get_string());
    try {
        parsed.content = base64_decode(content->get_string());
    } catch (const InvalidArgument&) {
        return InvalidParams{"upload_file: 'content_base64' is not valid base64"};
    }
    return parsed;
}

std::variant<std::string, InvalidParams> parse_download_file(const json::value* arguments) {
    if (arguments == nullptr || !arguments->is_object()) {
        return InvalidParams{"download_file needs an arguments object with a string 'path'"};
    }
    const auto& object = arguments->get_object();
    if (auto unknown = only(object, {"path"}, "download_file")) {
        return *unknown;
    }
    const auto* path = object.if_contains("path");
    if (path == nullptr || !path->is_string()) {
        return InvalidParams{"download_file needs 'path' as a string"};
    }
    return std::string(path->get_string());
}

json::object file_call_result(const kinds::FileToolResult& result, std::string_view path,
                              bool download, std::string_view protocol_version) {
    json::array content{json::object{{"type", "text"}, {"text", result.message}}};
    if (download && !result.is_error()) {
        // The URI names this one answer; the bytes travel in it, so nothing is kept for it.
        json::object resource{
            {"uri", fmt::format("{}://download/{}", kResourceScheme, random_hex(16))},
            {"mimeType", media_type_for(path)},
            {"blob", base64_encode(result.content)}};
        content.push_back(json::object{{"type", "resource"}, {"resource", std::move(resource)}});
    }
    json::object reply;
    reply["content"] = std::move(content);
    if (has_structured_content(protocol_version)) {
        json::object structured{{"path", path}};
        if (!result.guest_path.empty()) {
            structured["guest_path"] = result.guest_path;
        }
        if (!result.is_error()) {
            structured["size"] = result.size;
        } else {
            structured["error"] = result.message;
        }
        reply["structuredContent"] = std::move(structured);
    }
    reply["isError"] = result.is_error();
    return reply;
}

}  // namespace maf_sandbox::mcp::detail
