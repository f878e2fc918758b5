// parse_spec_json, what `maf-sandbox check --spec` and config files go through, on malformed and
// oversized input: InvalidArgument with a one-line message naming the field, never a crash.
#include <gtest/gtest.h>

#include <string>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/spec_json.hpp"

namespace maf_sandbox::badinput {
namespace {

std::string refusal(const std::string& text) {
    try {
        parse_spec_json(text);
    } catch (const InvalidArgument& e) {
        return e.what();
    }
    ADD_FAILURE() << "accepted: " << text.substr(0, 200);
    return {};
}

TEST(SpecJsonBadInput, MalformedAndWrongTypedSpecsAreRefusedNamingTheField) {
    using namespace std::string_literals;
    const std::vector<std::pair<std::string, std::string>> cases{
        {"", "spec"},
        {"{", "spec"},
        {"[]", "spec"},
        {"null", "spec"},
        {"{\"kind\":\"a\0b\"}"s, "spec"},
        {"{\"kind\":\"\xff\"}", "spec"},
        {R"({"kind":7})", "kind"},
        {R"({"kind":"k","egress":["closed"]})", "egress"},
        {R"({"kind":"k","labels":{"a":1}})", "labels"},
        {R"({"kind":"k","labels":[]})", "labels"},
        {R"({"kind":"k","requires":"exec"})", "requires"},
        {R"({"kind":"k","requires":["teleport"]})", "requires"},
        {R"({"kind":"k","files_in":{"max_files":-1}})", "files_in.max_files"},
        {R"({"kind":"k","files_in":{"max_files":1.5}})", "files_in.max_files"},
        {R"({"kind":"k","files_in":{"max_files":1e400}})", "spec"},
        {R"({"kind":"k","files_in":{"max_files":18446744073709551616}})", "files_in.max_files"},
        {R"({"kind":"k","declared_outputs":[{}]})", "declared_outputs[0].path"},
        {R"({"kind":"k","declared_outputs":[7]})", "declared_outputs[0]"},
        {R"({"kind":"k","host_tools":{"max_host_tool_calls_per_run":"many"}})",
         "host_tools.max_host_tool_calls_per_run"},
        {R"({"kind":"k","min_isolation":"process"})", "min_isolation"},
        {R"({"kind":"k","unknown_field":true})", "unknown_field"},
        {std::string(100000, '[') + std::string(100000, ']'), "spec"},
    };
    for (const auto& [text, field] : cases) {
        const auto message = refusal(text);
        EXPECT_NE(message.find(field), std::string::npos)
            << "for " << text.substr(0, 80) << ": " << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        EXPECT_LT(message.size(), 2000u) << "the message echoes too much input";
    }
}

TEST(SpecJsonBadInput, AnOversizedSpecIsHandledAndItsRefusalStaysOneShortLine) {
    // 16 MiB of kind, then an unknown egress: the refusal names the field without echoing it all.
    const std::string huge(16u << 20, 'k');
    const auto message = refusal(R"({"kind":")" + huge + R"(","egress":")" + huge + R"("})");
    EXPECT_NE(message.find("egress"), std::string::npos) << message.substr(0, 200);
    EXPECT_EQ(message.find('\n'), std::string::npos);
    EXPECT_LT(message.size(), 2000u) << "the refusal echoes the oversized value";
}

}  // namespace
}  // namespace maf_sandbox::badinput
