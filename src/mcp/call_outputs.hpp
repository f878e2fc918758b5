// The files one tools/call hands back (private to src/mcp): the output sink the call's outputs are
// delivered to, which lands each under `--out-dir/<session>/<call>/` (when the server has an
// out-dir), keeps it in the session's resources, and then adds it to the call's result: images
// (png, jpeg, gif, webp, svg) up to a cap inline as `image` content, every file as a
// `resource_link` the client reads with resources/read.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/outputs.hpp"
#include "session_resources.hpp"

namespace maf_sandbox::mcp::detail {

// The media type a file's name implies (its extension, case-insensitive); never sniffed from the
// bytes, which the program chose. Unknown: application/octet-stream.
std::string media_type_for(std::string_view name);

// png, jpeg, gif, webp and svg: the types returned as `image` content.
bool is_inline_image_type(std::string_view media_type);

// The directory name a session's outputs land under: its id when that is a plain name (the
// server's own ids are hex), otherwise a digest of it.
std::string landing_segment(std::string_view session_id);

struct CallOutputsOptions {
    // Unset: outputs are only handed back, never written to the host's disk.
    std::optional<std::filesystem::path> out_dir;
    std::string session_id;
    std::uint64_t max_inline_image_bytes = 0;
};

class CallOutputs : public std::enable_shared_from_this<CallOutputs> {
  public:
    CallOutputs(CallOutputsOptions options, std::shared_ptr<SessionResources> resources);

    // The sink for this call. Delivering lands first: a landing refusal fails the delivery, and
    // a file is kept as a resource only once it landed.
    OutputSink sink();

    // Adds what was delivered to a tools/call result: content items after the text, and
    // structuredContent.outputs when the result has structured content.
    void append_to(boost::json::object& reply, std::string_view protocol_version) const;

  private:
    struct Delivered {
        std::string name;
        std::string mime_type;
        std::uint64_t size = 0;
        std::optional<std::string> uri;
        std::optional<std::string> inline_data;  // base64
        std::optional<std::string> landed_as;    // relative to the out-dir
    };

    Task<LandedArtifact> deliver(Artifact artifact);
    std::filesystem::path call_directory();

    CallOutputsOptions options_;
    std::shared_ptr<SessionResources> resources_;
    std::optional<std::filesystem::path> call_directory_;
    std::string call_segment_;
    std::vector<Delivered> delivered_;
};

}  // namespace maf_sandbox::mcp::detail
