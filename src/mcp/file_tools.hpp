// The MCP face of ConversationFiles (private to src/mcp): the upload_file and download_file tool
// definitions, their strict argument parsing, and their results. Bytes travel as base64, in the
// call's arguments one way and as an embedded resource in the result the other.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <string>
#include <string_view>
#include <variant>

#include "maf_sandbox/kinds/conversation_files.hpp"
#include "tools.hpp"

namespace maf_sandbox::mcp::detail {

struct UploadArguments {
    std::string path;
    std::string content;  // decoded
};

boost::json::object upload_file_definition(const kinds::ConversationFiles& files,
                                           std::string_view protocol_version);
boost::json::object download_file_definition(const kinds::ConversationFiles& files,
                                             std::string_view protocol_version);

// Exactly {path: string, content_base64: string (valid base64)}.
std::variant<UploadArguments, InvalidParams> parse_upload_file(const boost::json::value* arguments);
// Exactly {path: string}.
std::variant<std::string, InvalidParams> parse_download_file(const boost::json::value* arguments);

// {content: [text, and for a download an embedded resource with the bytes as blob],
//  structuredContent (2025-06-18 on): {path, guest_path, size}, isError}.
boost::json::object file_call_result(const kinds::FileToolResult& result, std::string_view path,
                                     bool download, std::string_view protocol_version);

}  // namespace maf_sandbox::mcp::detail
