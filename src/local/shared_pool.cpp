#include "maf_sandbox/local/shared_pool.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::local {

namespace json = boost::json;

namespace {

std::optional<std::uint64_t> optional_number(const json::object& object, const char* name) {
    const auto* value = object.if_contains(name);
    if (value == nullptr || value->is_null()) {
        return std::nullopt;
    }
    return value->to_number<std::uint64_t>();
}

json::value number_or_null(const std::optional<std::uint64_t>& value) {
    return value ? json::value(*value) : json::value(nullptr);
}

}  // namespace

std::filesystem::path shared_pool_file(const std::filesystem::path& state_dir) {
    return state_dir / "pool.json";
}

std::optional<SharedPoolSettings> read_shared_pool(const std::filesystem::path& state_dir) {
    const auto path = shared_pool_file(state_dir);
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return std::nullopt;
    }
    std::stringstream text;
    text << in.rdbuf();
    try {
        const auto object = json::parse(text.str()).as_object();
        SharedPoolSettings settings;
        settings.size = object.at("size").to_number<std::size_t>();
        settings.image = object.at("image").as_string();
        settings.memory_bytes = optional_number(object, "memory_bytes");
        settings.pids = optional_number(object, "pids");
        settings.disk_bytes = optional_number(object, "disk_bytes");
        settings.signature = object.at("signature").as_string();
        return settings;
    } catch (const std::exception& e) {
        throw InvalidArgument(fmt::format(
            "{} does not hold pool settings ({}); set them again with `maf-sandbox pool set`",
            path.string(), e.what()));
    }
}

void write_shared_pool(const std::filesystem::path& state_dir, const SharedPoolSettings& settings) {
    const json::object object{{"size", settings.size},
                              {"image", settings.image},
                              {"memory_bytes", number_or_null(settings.memory_bytes)},
                              {"pids", number_or_null(settings.pids)},
                              {"disk_bytes", number_or_null(settings.disk_bytes)},
                              {"signature", settings.signature}};
    const auto path = shared_pool_file(state_dir);
    const auto temporary = fmt::format("{}.{}.tmp", path.string(), ::getpid());
    {
        std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
        out << json::serialize(object);
        if (!out.flush()) {
            throw SystemError(errno, fmt::format("writing {}", temporary));
        }
    }
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
        throw SystemError(errno, fmt::format("renaming {} to {}", temporary, path.string()));
    }
}

void remove_shared_pool(const std::filesystem::path& state_dir) {
    std::error_code ignored;
    std::filesystem::remove(shared_pool_file(state_dir), ignored);
}

}  // namespace maf_sandbox::local
