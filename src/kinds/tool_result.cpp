#include "maf_sandbox/kinds/tool_result.hpp"

#include <fmt/format.h>

namespace maf_sandbox::kinds {
namespace {

void append_stream(std::string& text, std::string_view label, const std::string& stream) {
    if (stream.empty()) {
        return;
    }
    text += fmt::format("--- {} ---\n{}", label, stream);
    if (stream.back() != '\n') {
        text += '\n';
    }
}

// Fixed, so a model reads the same words whichever backend discarded what.
constexpr const char* kSandboxReplacedSentence =
    "Note: this conversation's previous sandbox was discarded after a failure, so this call ran in "
    "a new one: files and processes left by earlier calls are gone.";

}  // namespace

std::string ToolResult::text() const {
    std::string text;
    if (sandbox_replaced) {
        text += kSandboxReplacedSentence;
        text += '\n';
    }
    if (!message.empty()) {
        text += message;
        text += '\n';
    }
    if (program) {
        if (failure == CallFailure::output_over_cap) {
            text += fmt::format("output head ({} further bytes dropped):\n", dropped_bytes);
        } else if (failure == CallFailure::timed_out) {
            text += "output before the timeout:\n";
        } else {
            text += fmt::format("exit code: {}\n", program->exit_code);
        }
        append_stream(text, "stdout", program->stdout_text);
        append_stream(text, "stderr", program->stderr_text);
    }
    if (!landed.empty()) {
        text += "landed outputs:\n";
        for (const auto& line : landed) {
            text += fmt::format("  {}\n", line);
        }
    }
    if (!unmatched_outputs.empty()) {
        text += "no file matched these outputs:\n";
        for (const auto& pattern : unmatched_outputs) {
            text += fmt::format("  {}\n", pattern);
        }
    }
    text += fmt::format("[sandbox: backend {}, isolation {}, egress {}]", provenance.backend,
                        to_string(provenance.isolation), to_string(provenance.egress));
    return text;
}

}  // namespace maf_sandbox::kinds
