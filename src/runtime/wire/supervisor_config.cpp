// The supervisor's configuration as the launcher writes it and the supervisor reads it back, and
// the cgroup placement the launcher sends while the supervisor starts.
#include <boost/json.hpp>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/wire/supervisor_config.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

json::array strings(const std::vector<std::string>& items) {
    json::array out;
    for (const auto& item : items) {
        out.emplace_back(item);
    }
    return out;
}

json::array paths(const std::vector<fs::path>& items) {
    json::array out;
    for (const auto& item : items) {
        out.emplace_back(item.string());
    }
    return out;
}

std::vector<std::string> strings_from(const json::value& value) {
    std::vector<std::string> out;
    for (const auto& item : value.as_array()) {
        out.emplace_back(item.as_string());
    }
    return out;
}

std::vector<fs::path> paths_from(const json::value& value) {
    std::vector<fs::path> out;
    for (const auto& item : value.as_array()) {
        out.emplace_back(std::string(item.as_string()));
    }
    return out;
}

template <typename T>
T number(const json::object& in, const char* key) {
    return in.at(key).to_number<T>();
}

std::string hex_of(const std::vector<sock_filter>& program) {
    constexpr char kDigits[] = "0123456789abcdef";
    const auto* bytes = reinterpret_cast<const unsigned char*>(program.data());
    std::string out;
    out.reserve(program.size() * sizeof(sock_filter) * 2);
    for (std::size_t i = 0; i < program.size() * sizeof(sock_filter); ++i) {
        out.push_back(kDigits[bytes[i] >> 4]);
        out.push_back(kDigits[bytes[i] & 0xF]);
    }
    return out;
}

std::vector<sock_filter> filter_of_hex(std::string_view hex) {
    const auto digit = [](char c) -> int {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    };
    if (hex.empty() || hex.size() % (2 * sizeof(sock_filter)) != 0) {
        throw InvalidArgument("the supervisor config's seccomp_bpf is not a whole BPF program");
    }
    std::vector<sock_filter> program(hex.size() / (2 * sizeof(sock_filter)));
    auto* bytes = reinterpret_cast<unsigned char*>(program.data());
    for (std::size_t i = 0; i < hex.size() / 2; ++i) {
        const int high = digit(hex[2 * i]);
        const int low = digit(hex[2 * i + 1]);
        if (high < 0 || low < 0) {
            throw InvalidArgument("the supervisor config's seccomp_bpf is not lowercase hex");
        }
        bytes[i] = static_cast<unsigned char>(high << 4 | low);
    }
    return program;
}

}  // namespace

json::value to_json(const SupervisorConfig& config) {
    const auto& plan = config.mounts;
    json::array binds;
    for (const auto& bind : plan.ro_binds) {
        binds.emplace_back(json::object{{"source", bind.source.string()}, {"target", bind.target}});
    }
    json::array files;
    for (const auto& file : plan.files) {
        files.emplace_back(
            json::object{{"target", file.target}, {"content", file.content}, {"mode", file.mode}});
    }
    json::array env;
    for (const auto& [key, value] : config.base_env) {
        env.emplace_back(json::array{json::string(key), json::string(value)});
    }
    json::object mounts{{"lower_dirs", paths(plan.lower_dirs)},
                        {"ro_binds", std::move(binds)},
                        {"files", std::move(files)},
                        {"guest_dirs", strings(plan.guest_dirs)},
                        {"disk_bytes", plan.disk_bytes},
                        {"tmp_bytes", plan.tmp_bytes},
                        {"shm_bytes", plan.shm_bytes},
                        {"root_uid", plan.root_uid},
                        {"root_gid", plan.root_gid},
                        {"guest_uid", plan.guest_uid},
                        {"guest_gid", plan.guest_gid},
                        {"layer_mount_point", plan.layer_mount_point.string()}};
    json::object out{{"id", config.id},
                     {"sandbox_dir", config.sandbox_dir.string()},
                     {"socket_path", config.socket_path.string()},
                     {"mounts", std::move(mounts)},
                     {"id_base", config.ids.host_base},
                     {"id_count", config.ids.count},
                     {"guest_uid", config.guest_uid},
                     {"guest_gid", config.guest_gid},
                     {"env", std::move(env)},
                     {"default_cwd", config.default_cwd},
                     {"hostname", config.hostname},
                     {"cgroup_layout", to_string(config.cgroup_layout)},
                     {"delegated_cgroups", paths(config.delegated_cgroups)}};
    if (config.idle_timeout) {
        out["idle_timeout_s"] = config.idle_timeout->count();
    }
    if (config.max_lifetime) {
        out["max_lifetime_s"] = config.max_lifetime->count();
    }
    out["egress"] = config.egress.to_json();
    out["egress_operator"] = config.egress_operator.to_json();
    out["seccomp_bpf"] = hex_of(config.seccomp);
    if (config.owner) {
        out["owner"] = to_json(*config.owner);
    }
    if (!config.owner_pending_label.empty()) {
        out["owner_pending_label"] = config.owner_pending_label;
    }
    if (config.watch_later_owners) {
        out["watch_later_owners"] = true;
    }
    out["budgets"] = config.budgets.to_json();
    if (config.rootless) {
        out["rootless"] = json::object{{"uid", config.rootless->uid},
                                       {"gid", config.rootless->gid},
                                       {"sub_base", config.rootless->sub_base},
                                       {"sub_count", config.rootless->sub_count},
                                       {"pids", config.rootless->pids}};
    }
    return out;
}

SupervisorConfig supervisor_config_from_json(const json::value& value) {
    const auto& in = value.as_object();
    SupervisorConfig config;
    config.id = std::string(in.at("id").as_string());
    config.sandbox_dir = std::string(in.at("sandbox_dir").as_string());
    config.socket_path = std::string(in.at("socket_path").as_string());
    const auto& mounts = in.at("mounts").as_object();
    auto& plan = config.mounts;
    plan.lower_dirs = paths_from(mounts.at("lower_dirs"));
    for (const auto& bind : mounts.at("ro_binds").as_array()) {
        plan.ro_binds.push_back({std::string(bind.at("source").as_string()),
                                 std::string(bind.at("target").as_string())});
    }
    for (const auto& file : mounts.at("files").as_array()) {
        plan.files.push_back({std::string(file.at("target").as_string()),
                              std::string(file.at("content").as_string()),
                              file.at("mode").to_number<mode_t>()});
    }
    plan.guest_dirs = strings_from(mounts.at("guest_dirs"));
    plan.disk_bytes = number<std::uint64_t>(mounts, "disk_bytes");
    plan.tmp_bytes = number<std::uint64_t>(mounts, "tmp_bytes");
    plan.shm_bytes = number<std::uint64_t>(mounts, "shm_bytes");
    plan.root_uid = number<uid_t>(mounts, "root_uid");
    plan.root_gid = number<gid_t>(mounts, "root_gid");
    plan.guest_uid = number<uid_t>(mounts, "guest_uid");
    plan.guest_gid = number<gid_t>(mounts, "guest_gid");
    if (const auto* point = mounts.if_contains("layer_mount_point")) {
        plan.layer_mount_point = std::string(point->as_string());
    }
    config.ids.host_base = number<uid_t>(in, "id_base");
    config.ids.count = number<std::uint32_t>(in, "id_count");
    config.guest_uid = number<uid_t>(in, "guest_uid");
    config.guest_gid = number<gid_t>(in, "guest_gid");
    for (const auto& pair : in.at("env").as_array()) {
        config.base_env.emplace_back(std::string(pair.at(0).as_string()),
                                     std::string(pair.at(1).as_string()));
    }
    config.default_cwd = std::string(in.at("default_cwd").as_string());
    config.hostname = std::string(in.at("hostname").as_string());
    config.cgroup_layout = parse_cgroup_layout(in.at("cgroup_layout").as_string());
    config.delegated_cgroups = paths_from(in.at("delegated_cgroups"));
    if (const auto* idle = in.if_contains("idle_timeout_s")) {
        config.idle_timeout = std::chrono::seconds(idle->to_number<std::int64_t>());
    }
    if (const auto* lifetime = in.if_contains("max_lifetime_s")) {
        config.max_lifetime = std::chrono::seconds(lifetime->to_number<std::int64_t>());
    }
    if (const auto* egress = in.if_contains("egress")) {
        config.egress = EgressPolicy::from_json(*egress);
    }
    if (const auto* options = in.if_contains("egress_operator")) {
        config.egress_operator = EgressOperatorOptions::from_json(*options);
    }
    config.seccomp = filter_of_hex(in.at("seccomp_bpf").as_string());
    if (const auto* owner = in.if_contains("owner")) {
        config.owner = owner_from_json(*owner);
    }
    if (const auto* label = in.if_contains("owner_pending_label")) {
        config.owner_pending_label = std::string(label->as_string());
    }
    if (const auto* later = in.if_contains("watch_later_owners")) {
        config.watch_later_owners = later->as_bool();
    }
    if (const auto* budgets = in.if_contains("budgets")) {
        config.budgets = SandboxBudgets::from_json(*budgets);
    }
    if (const auto* rootless = in.if_contains("rootless")) {
        const auto& map = rootless->as_object();
        config.rootless = RootlessIdMap{
            number<uid_t>(map, "uid"), number<gid_t>(map, "gid"), number<uid_t>(map, "sub_base"),
            number<std::uint32_t>(map, "sub_count"), number<std::uint64_t>(map, "pids")};
    }
    return config;
}

std::string to_line(const CgroupPlacement& placement) {
    const json::object out{{"layout", to_string(placement.layout)},
                           {"delegated", paths(placement.delegated)},
                           {"join_files", paths(placement.join_files)},
                           {"oom_kill_count_file", placement.oom_kill_count_file.string()}};
    return json::serialize(out) + "\n";
}

CgroupPlacement cgroup_placement_from_line(std::string_view line) {
    const auto in = json::parse(line).as_object();
    return CgroupPlacement{parse_cgroup_layout(in.at("layout").as_string()),
                           paths_from(in.at("delegated")), paths_from(in.at("join_files")),
                           std::string(in.at("oom_kill_count_file").as_string())};
}

}  // namespace maf_sandbox::runtime
