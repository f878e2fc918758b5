#include "maf_sandbox/core/spec_json.hpp"

#include <gtest/gtest.h>

#include <string>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox {
namespace {

// The message of the InvalidArgument that parsing `text` throws ("" when it does not throw).
std::string refusal(std::string_view text) {
    try {
        parse_spec_json(text);
    } catch (const InvalidArgument& e) {
        return e.what();
    }
    return "";
}

::testing::AssertionResult refused_naming(std::string_view text, std::string_view fragment) {
    const auto message = refusal(text);
    if (message.empty()) {
        return ::testing::AssertionFailure() << "accepted: " << text;
    }
    if (message.find('\n') != std::string::npos) {
        return ::testing::AssertionFailure() << "message spans lines: " << message;
    }
    if (message.find(fragment) == std::string::npos) {
        return ::testing::AssertionFailure() << "'" << message << "' lacks '" << fragment << "'";
    }
    return ::testing::AssertionSuccess();
}

TEST(SpecJson, AMinimalSpecTakesTheProtocolDefaults) {
    const auto spec = parse_spec_json(R"({"kind": "shell"})");
    SandboxSpecFields expected;
    expected.kind = "shell";
    EXPECT_EQ(spec.fields(), expected);
    EXPECT_EQ(spec->egress, Egress::closed);
    EXPECT_FALSE(spec->work_dir.has_value());
}

TEST(SpecJson, ReadsEveryFieldWithSnakeCaseNames) {
    const auto spec = parse_spec_json(R"({
        "kind": "codeact",
        "image": "python:3.12",
        "image_id": "sha256:abc",
        "egress": "allowlist",
        "egress_allow": ["pypi.org", "GET example.com"],
        "work_dir": "/work",
        "labels": {"team": "a"},
        "requires": ["exec", "files_out", "reclaim"],
        "min_isolation": "container",
        "declared_outputs": [{"path": "out.csv", "disposition": "consume",
                              "media_type": "text/csv", "required": false, "name": "r.csv"}],
        "files_in": {"max_bytes_per_file": 10, "max_total_bytes": 20, "max_files": 3},
        "files_out": {"max_files": 2},
        "outputs_named_at_call_time": true,
        "host_tools": {"result_integrity": "trusted", "outbound_caps": ["mail"],
                       "identities": ["app"], "requires_approval": true,
                       "has_undeclared": false, "max_host_tool_calls_per_run": 4},
        "requires_os_family": "posix",
        "isolation_scope": "call"
    })");
    EXPECT_EQ(spec->kind, "codeact");
    EXPECT_EQ(spec->image, "python:3.12");
    EXPECT_EQ(spec->image_id, "sha256:abc");
    EXPECT_EQ(spec->egress, Egress::allowlist);
    EXPECT_EQ(spec->egress_allow, (std::vector<std::string>{"pypi.org", "GET example.com"}));
    EXPECT_EQ(spec->work_dir, "/work");
    EXPECT_EQ(spec->labels.at("team"), "a");
    EXPECT_EQ(spec->requires_capabilities,
              (std::set<Capability>{Capability::exec, Capability::files_out, Capability::reclaim}));
    EXPECT_EQ(spec->min_isolation, Isolation::container);
    ASSERT_EQ(spec->declared_outputs.size(), 1U);
    EXPECT_EQ(spec->declared_outputs[0].disposition, OutputDisposition::consume);
    EXPECT_FALSE(spec->declared_outputs[0].required);
    EXPECT_EQ(spec->declared_outputs[0].name, "r.csv");
    EXPECT_EQ(spec->files_in, (TransferLimits{10, 20, 3}));
    // Members a limits object leaves out keep the default.
    EXPECT_EQ(spec->files_out, (TransferLimits{kDefaultTransferLimits.max_bytes_per_file,
                                               kDefaultTransferLimits.max_total_bytes, 2}));
    EXPECT_TRUE(spec->outputs_named_at_call_time);
    ASSERT_TRUE(spec->host_tools.has_value());
    EXPECT_EQ(spec->host_tools->max_host_tool_calls_per_run, 4U);
    EXPECT_EQ(spec.identities(), std::set<Identity>{Identity::app});
    EXPECT_EQ(spec->requires_os_family, OsFamily::posix);
    EXPECT_EQ(spec->isolation_scope, IsolationScope::call);
}

TEST(SpecJson, ToJsonRoundTripsEveryField) {
    SandboxSpecFields fields;
    fields.kind = "codeact";
    fields.image = "img";
    fields.egress = Egress::allowlist;
    fields.egress_allow = {"a.example", "POST b.example"};
    fields.work_dir = "/w";
    fields.labels = {{"x", "y"}};
    fields.requires_capabilities = {Capability::files_list, Capability::snapshot};
    fields.min_isolation = Isolation::vm;
    fields.declared_outputs = {
        DeclaredOutput{"o", OutputDisposition::land, "text/plain", true, {}}};
    fields.files_in = {1, 2, 3};
    fields.files_out = {4, 5, 6};
    fields.outputs_named_at_call_time = true;
    fields.host_tools = HostToolAggregate{
        SourceIntegrity::untrusted, {"c"}, {Identity::user}, false, true, {7, 8, 9}, 3};
    fields.requires_os_family = OsFamily::windows;
    fields.isolation_scope = IsolationScope::call;
    const SandboxSpec spec(fields);
    EXPECT_EQ(parse_spec_json(spec_to_json(spec)), spec);

    SandboxSpecFields minimal;
    minimal.kind = "k";
    EXPECT_EQ(parse_spec_json(spec_to_json(SandboxSpec(minimal))), SandboxSpec(minimal));
}

TEST(SpecJson, NullClearsOptionalFields) {
    const auto spec = parse_spec_json(
        R"({"kind": "k", "image": null, "min_isolation": null, "work_dir": null,
            "requires_os_family": null, "host_tools": null})");
    EXPECT_FALSE(spec->image.has_value());
    EXPECT_FALSE(spec->min_isolation.has_value());
    EXPECT_FALSE(spec->host_tools.has_value());
}

TEST(SpecJsonErrors, AnUnknownEnumStringNamesTheFieldAndTheChoices) {
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "egress": "open"})",
                               "spec field 'egress': unknown egress mode 'open'; use one of:"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "min_isolation": "process"})",
                               "spec field 'min_isolation'"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "requires": ["exec", "network"]})",
                               "spec field 'requires[1]'"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "isolation_scope": "tool"})",
                               "spec field 'isolation_scope'"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "requires_os_family": "linux"})",
                               "spec field 'requires_os_family'"));
    EXPECT_TRUE(refused_naming(
        R"({"kind": "k", "declared_outputs": [{"path": "a", "disposition": "keep"}]})",
        "spec field 'declared_outputs[0].disposition'"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "host_tools": {"identities": ["root"]}})",
                               "spec field 'host_tools.identities[0]'"));
}

TEST(SpecJsonErrors, AnUnknownFieldIsRefusedByName) {
    EXPECT_TRUE(
        refused_naming(R"({"kind": "k", "egres": "closed"})", "spec field 'egres': unknown field"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "files_in": {"max_file": 1}})",
                               "spec field 'files_in.max_file': unknown field"));
    // The JSON name is `requires`; the C++ member name is not accepted.
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "requires_capabilities": []})",
                               "spec field 'requires_capabilities'"));
}

TEST(SpecJsonErrors, AWrongTypeNamesTheFieldAndTheExpectedType) {
    EXPECT_TRUE(
        refused_naming(R"({"kind": 5})", "spec field 'kind': expected a string, got a number"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "egress_allow": "a.example"})",
                               "spec field 'egress_allow': expected an array"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "files_out": 5})",
                               "spec field 'files_out': expected an object"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "outputs_named_at_call_time": "yes"})",
                               "spec field 'outputs_named_at_call_time'"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "labels": {"a": 1}})", "spec field 'labels.a'"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "files_in": {"max_files": 1.5}})",
                               "spec field 'files_in.max_files': expected a whole number"));
}

TEST(SpecJsonErrors, NegativeNumbersAreRefused) {
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "files_in": {"max_files": -1}})",
                               "spec field 'files_in.max_files': must not be negative"));
    EXPECT_TRUE(refused_naming(
        R"({"kind": "k", "host_tools": {"response_limits": {"max_total_bytes": -2}}})",
        "spec field 'host_tools.response_limits.max_total_bytes'"));
}

TEST(SpecJsonErrors, AMissingOrEmptyKindIsRefused) {
    EXPECT_TRUE(refused_naming(R"({"egress": "closed"})", "spec field 'kind': missing"));
    EXPECT_TRUE(refused_naming(R"({"kind": ""})", "spec field 'kind'"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "declared_outputs": [{"required": true}]})",
                               "spec field 'declared_outputs[0].path': missing"));
}

TEST(SpecJsonErrors, MalformedJsonSaysWhere) {
    EXPECT_TRUE(refused_naming("{\"kind\": \"k\",\n  \"egress\" \"closed\"}", "line 2"));
    EXPECT_TRUE(refused_naming("", "malformed JSON"));
    EXPECT_TRUE(refused_naming(R"({"kind": "k"} trailing)", "malformed JSON"));
    EXPECT_TRUE(refused_naming(R"(["kind"])", "expected a JSON object"));
}

TEST(SpecJsonErrors, TheSpecsOwnInvariantsStillApply) {
    EXPECT_TRUE(refused_naming(R"({"kind": "k", "egress_allow": ["a.example"]})",
                               "set egress to 'allowlist'"));
}

}  // namespace
}  // namespace maf_sandbox
