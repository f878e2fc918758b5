#include "maf_sandbox/core/spec_json.hpp"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox {
namespace {

namespace json = boost::json;

// Every refusal names the field by its dotted path ("files_in.max_files",
// "declared_outputs[1].path") and fits on one line.
[[noreturn]] void refuse(const std::string& field, const std::string& what) {
    throw InvalidArgument(fmt::format("spec field '{}': {}", field, what));
}

std::string_view json_type(const json::value& value) {
    switch (value.kind()) {
        case json::kind::null:
            return "null";
        case json::kind::bool_:
            return "a boolean";
        case json::kind::int64:
        case json::kind::uint64:
        case json::kind::double_:
            return "a number";
        case json::kind::string:
            return "a string";
        case json::kind::array:
            return "an array";
        case json::kind::object:
            return "an object";
    }
    return "an unknown JSON value";
}

[[noreturn]] void refuse_type(const std::string& field, std::string_view expected,
                              const json::value& value) {
    refuse(field, fmt::format("expected {}, got {}", expected, json_type(value)));
}

std::string read_string(const json::value& value, const std::string& field) {
    if (!value.is_string()) {
        refuse_type(field, "a string", value);
    }
    return std::string(value.get_string());
}

std::optional<std::string> read_optional_string(const json::value& value,
                                                const std::string& field) {
    if (value.is_null()) {
        return std::nullopt;
    }
    return read_string(value, field);
}

bool read_bool(const json::value& value, const std::string& field) {
    if (!value.is_bool()) {
        refuse_type(field, "true or false", value);
    }
    return value.get_bool();
}

std::uint64_t read_count(const json::value& value, const std::string& field) {
    if (value.is_uint64()) {
        return value.get_uint64();
    }
    if (value.is_int64()) {
        if (value.get_int64() < 0) {
            refuse(field, fmt::format("must not be negative, got {}", value.get_int64()));
        }
        return static_cast<std::uint64_t>(value.get_int64());
    }
    if (value.is_double()) {
        const double number = value.get_double();
        if (number < 0) {
            refuse(field, fmt::format("must not be negative, got {}", number));
        }
        refuse(field, fmt::format("expected a whole number, got {}", number));
    }
    refuse_type(field, "a non-negative whole number", value);
}

template <typename Enum>
Enum read_enum(const json::value& value, const std::string& field,
               Enum (*parse)(std::string_view)) {
    const auto text = read_string(value, field);
    try {
        return parse(text);
    } catch (const InvalidArgument& e) {
        // The vocabulary's message already lists the accepted strings.
        refuse(field, e.what());
    }
}

template <typename Enum>
std::set<Enum> read_enum_set(const json::value& value, const std::string& field,
                             Enum (*parse)(std::string_view)) {
    if (!value.is_array()) {
        refuse_type(field, "an array of strings", value);
    }
    std::set<Enum> result;
    const auto& items = value.get_array();
    for (std::size_t i = 0; i < items.size(); ++i) {
        result.insert(read_enum(items[i], fmt::format("{}[{}]", field, i), parse));
    }
    return result;
}

std::vector<std::string> read_string_array(const json::value& value, const std::string& field) {
    if (!value.is_array()) {
        refuse_type(field, "an array of strings", value);
    }
    std::vector<std::string> result;
    const auto& items = value.get_array();
    for (std::size_t i = 0; i < items.size(); ++i) {
        result.push_back(read_string(items[i], fmt::format("{}[{}]", field, i)));
    }
    return result;
}

// Walks an object's members against a table of known names, so an unknown member (a typo such
// as "egres") is refused by name instead of silently ignored.
using MemberReader = std::function<void(const json::value&, const std::string&)>;

void read_object(const json::value& value, const std::string& field,
                 const std::map<std::string_view, MemberReader>& readers) {
    if (!value.is_object()) {
        refuse_type(field, "an object", value);
    }
    for (const auto& member : value.get_object()) {
        const std::string name(member.key());
        const auto path = field.empty() ? name : fmt::format("{}.{}", field, name);
        const auto reader = readers.find(name);
        if (reader == readers.end()) {
            std::string known;
            for (const auto& [known_name, unused] : readers) {
                known += known.empty() ? "" : ", ";
                known += known_name;
            }
            refuse(path, fmt::format("unknown field; known fields here: {}", known));
        }
        reader->second(member.value(), path);
    }
}

TransferLimits read_limits(const json::value& value, const std::string& field) {
    TransferLimits limits = kDefaultTransferLimits;
    read_object(
        value, field,
        {
            {"max_bytes_per_file",
             [&](const json::value& v, const std::string& f) {
                 limits.max_bytes_per_file = read_count(v, f);
             }},
            {"max_total_bytes",
             [&](const json::value& v, const std::string& f) {
                 limits.max_total_bytes = read_count(v, f);
             }},
            {"max_files", [&](const json::value& v,
                              const std::string& f) { limits.max_files = read_count(v, f); }},
        });
    return limits;
}

DeclaredOutput read_declared_output(const json::value& value, const std::string& field) {
    DeclaredOutput output;
    bool has_path = false;
    read_object(
        value, field,
        {
            {"path",
             [&](const json::value& v, const std::string& f) {
                 output.path = read_string(v, f);
                 has_path = true;
             }},
            {"disposition",
             [&](const json::value& v, const std::string& f) {
                 output.disposition = read_enum(v, f, &parse_output_disposition);
             }},
            {"media_type",
             [&](const json::value& v, const std::string& f) {
                 output.media_type = read_optional_string(v, f);
             }},
            {"required", [&](const json::value& v,
                             const std::string& f) { output.required = read_bool(v, f); }},
            {"name", [&](const json::value& v,
                         const std::string& f) { output.name = read_optional_string(v, f); }},
        });
    if (!has_path) {
        refuse(field + ".path", "missing; every declared output names its literal path");
    }
    return output;
}

std::optional<HostToolAggregate> read_host_tools(const json::value& value,
                                                 const std::string& field) {
    if (value.is_null()) {
        return std::nullopt;
    }
    HostToolAggregate tools;
    read_object(value, field,
                {
                    {"result_integrity",
                     [&](const json::value& v, const std::string& f) {
                         if (v.is_null()) {
                             tools.result_integrity.reset();
                         } else {
                             tools.result_integrity = read_enum(v, f, &parse_source_integrity);
                         }
                     }},
                    {"outbound_caps",
                     [&](const json::value& v, const std::string& f) {
                         const auto caps = read_string_array(v, f);
                         tools.outbound_caps = {caps.begin(), caps.end()};
                     }},
                    {"identities",
                     [&](const json::value& v, const std::string& f) {
                         tools.identities = read_enum_set(v, f, &parse_identity);
                     }},
                    {"requires_approval",
                     [&](const json::value& v, const std::string& f) {
                         tools.requires_approval = read_bool(v, f);
                     }},
                    {"has_undeclared",
                     [&](const json::value& v, const std::string& f) {
                         tools.has_undeclared = read_bool(v, f);
                     }},
                    {"response_limits",
                     [&](const json::value& v, const std::string& f) {
                         tools.response_limits = read_limits(v, f);
                     }},
                    {"max_host_tool_calls_per_run",
                     [&](const json::value& v, const std::string& f) {
                         tools.max_host_tool_calls_per_run = read_count(v, f);
                     }},
                });
    return tools;
}

SandboxSpecFields read_fields(const json::value& root) {
    if (!root.is_object()) {
        throw InvalidArgument(fmt::format(
            "spec: expected a JSON object at the top level, got {}; wrap the fields in {{...}}",
            json_type(root)));
    }
    SandboxSpecFields fields;
    bool has_kind = false;
    read_object(
        root, "",
        {
            {"kind",
             [&](const json::value& v, const std::string& f) {
                 fields.kind = read_string(v, f);
                 if (fields.kind.empty()) {
                     refuse(f, "must not be empty; name the workload");
                 }
                 has_kind = true;
             }},
            {"image", [&](const json::value& v,
                          const std::string& f) { fields.image = read_optional_string(v, f); }},
            {"image_id",
             [&](const json::value& v, const std::string& f) {
                 fields.image_id = read_optional_string(v, f);
             }},
            {"egress_allow",
             [&](const json::value& v, const std::string& f) {
                 fields.egress_allow = read_string_array(v, f);
             }},
            {"work_dir",
             [&](const json::value& v, const std::string& f) {
                 fields.work_dir = read_optional_string(v, f);
             }},
            {"labels",
             [&](const json::value& v, const std::string& f) {
                 if (!v.is_object()) {
                     refuse_type(f, "an object of strings", v);
                 }
                 for (const auto& member : v.get_object()) {
                     const std::string name(member.key());
                     fields.labels[name] = read_string(member.value(), f + "." + name);
                 }
             }},
            {"requires",
             [&](const json::value& v, const std::string& f) {
                 fields.requires_capabilities = read_enum_set(v, f, &parse_capability);
             }},
            {"min_isolation",
             [&](const json::value& v, const std::string& f) {
                 if (v.is_null()) {
                     fields.min_isolation.reset();
                 } else {
                     fields.min_isolation = read_enum(v, f, &parse_isolation);
                 }
             }},
            {"declared_outputs",
             [&](const json::value& v, const std::string& f) {
                 if (!v.is_array()) {
                     refuse_type(f, "an array of objects", v);
                 }
                 const auto& items = v.get_array();
                 for (std::size_t i = 0; i < items.size(); ++i) {
                     fields.declared_outputs.push_back(
                         read_declared_output(items[i], fmt::format("{}[{}]", f, i)));
                 }
             }},
            {"files_in", [&](const json::value& v,
                             const std::string& f) { fields.files_in = read_limits(v, f); }},
            {"files_out", [&](const json::value& v,
                              const std::string& f) { fields.files_out = read_limits(v, f); }},
            {"outputs_named_at_call_time",
             [&](const json::value& v, const std::string& f) {
                 fields.outputs_named_at_call_time = read_bool(v, f);
             }},
            {"host_tools",
             [&](const json::value& v, const std::string& f) {
                 fields.host_tools = read_host_tools(v, f);
             }},
            {"egress",
             [&](const json::value& v, const std::string& f) {
                 fields.egress = read_enum(v, f, &parse_egress);
             }},
            {"requires_os_family",
             [&](const json::value& v, const std::string& f) {
                 if (v.is_null()) {
                     fields.requires_os_family.reset();
                 } else {
                     fields.requires_os_family = read_enum(v, f, &parse_os_family);
                 }
             }},
            {"isolation_scope",
             [&](const json::value& v, const std::string& f) {
                 fields.isolation_scope = read_enum(v, f, &parse_isolation_scope);
             }},
        });
    if (!has_kind) {
        refuse("kind", "missing; every spec names its workload kind (a non-empty string)");
    }
    return fields;
}

json::value parse_json_text(std::string_view text) {
    json::parser parser;
    boost::system::error_code error;
    const auto consumed = parser.write(text.data(), text.size(), error);
    if (error) {
        // The line and column point the user at the first character the parser rejected.
        std::size_t line = 1;
        std::size_t column = 1;
        for (std::size_t i = 0; i < consumed && i < text.size(); ++i) {
            if (text[i] == '\n') {
                ++line;
                column = 1;
            } else {
                ++column;
            }
        }
        throw InvalidArgument(
            fmt::format("spec: malformed JSON at line {}, column {}: {}; fix "
                        "the JSON syntax",
                        line, column, error.message()));
    }
    return parser.release();
}

template <typename Enum>
json::array enum_array(const std::set<Enum>& values) {
    json::array array;
    for (auto value : values) {
        array.emplace_back(json::string(to_string(value)));
    }
    return array;
}

json::object limits_json(const TransferLimits& limits) {
    return {{"max_bytes_per_file", limits.max_bytes_per_file},
            {"max_total_bytes", limits.max_total_bytes},
            {"max_files", limits.max_files}};
}

}  // namespace

namespace {

// Refusals echo what they refuse, which is untrusted: a control character would break the one-line
// promise and a 16 MiB value would flood a terminal or a log, so the message is cut and cleaned.
constexpr std::size_t kMaxRefusalBytes = 1000;

std::string one_line(std::string_view message) {
    std::string line(message.substr(0, kMaxRefusalBytes));
    for (auto& c : line) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f) {
            c = '?';
        }
    }
    if (message.size() > kMaxRefusalBytes) {
        line += "...";
    }
    return replace_invalid_utf8(line);
}

}  // namespace

SandboxSpec parse_spec_json(std::string_view text) {
    try {
        return SandboxSpec(read_fields(parse_json_text(text)));
    } catch (const InvalidArgument& e) {
        throw InvalidArgument(one_line(e.what()));
    }
}

std::string spec_to_json(const SandboxSpec& spec) {
    const auto& f = spec.fields();
    json::object root;
    root["kind"] = f.kind;
    if (f.image) {
        root["image"] = *f.image;
    }
    if (f.image_id) {
        root["image_id"] = *f.image_id;
    }
    json::array allow;
    for (const auto& rule : f.egress_allow) {
        allow.emplace_back(json::string(rule));
    }
    root["egress_allow"] = std::move(allow);
    if (f.work_dir) {
        root["work_dir"] = *f.work_dir;
    }
    json::object labels;
    for (const auto& [name, value] : f.labels) {
        labels[name] = value;
    }
    root["labels"] = std::move(labels);
    root["requires"] = enum_array(f.requires_capabilities);
    if (f.min_isolation) {
        root["min_isolation"] = to_string(*f.min_isolation);
    }
    json::array outputs;
    for (const auto& output : f.declared_outputs) {
        json::object entry;
        entry["path"] = output.path;
        entry["disposition"] = to_string(output.disposition);
        if (output.media_type) {
            entry["media_type"] = *output.media_type;
        }
        entry["required"] = output.required;
        if (output.name) {
            entry["name"] = *output.name;
        }
        outputs.emplace_back(std::move(entry));
    }
    root["declared_outputs"] = std::move(outputs);
    root["files_in"] = limits_json(f.files_in);
    root["files_out"] = limits_json(f.files_out);
    root["outputs_named_at_call_time"] = f.outputs_named_at_call_time;
    if (f.host_tools) {
        const auto& tools = *f.host_tools;
        json::object entry;
        if (tools.result_integrity) {
            entry["result_integrity"] = to_string(*tools.result_integrity);
        }
        json::array caps;
        for (const auto& cap : tools.outbound_caps) {
            caps.emplace_back(json::string(cap));
        }
        entry["outbound_caps"] = std::move(caps);
        entry["identities"] = enum_array(tools.identities);
        entry["requires_approval"] = tools.requires_approval;
        entry["has_undeclared"] = tools.has_undeclared;
        entry["response_limits"] = limits_json(tools.response_limits);
        entry["max_host_tool_calls_per_run"] = tools.max_host_tool_calls_per_run;
        root["host_tools"] = std::move(entry);
    }
    root["egress"] = to_string(f.egress);
    if (f.requires_os_family) {
        root["requires_os_family"] = to_string(*f.requires_os_family);
    }
    root["isolation_scope"] = to_string(f.isolation_scope);
    return json::serialize(root);
}

}  // namespace maf_sandbox
