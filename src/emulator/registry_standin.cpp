#include "registry_standin.hpp"

#include <fmt/format.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fstream>
#include <functional>
#include <sstream>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/net/tls.hpp"
#include "state_store.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
namespace {

json::object read_index(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) {
        return {};
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    boost::system::error_code ec;
    auto value = json::parse(buffer.str(), ec);
    return !ec && value.is_object() ? value.as_object() : json::object{};
}

}  // namespace

RegistryStandIn::RegistryStandIn(std::filesystem::path state_dir)
    : dir_(std::move(state_dir) / "registry") {}

void RegistryStandIn::add(const std::filesystem::path& archive, const std::string& ref) {
    if (ref.empty() || ref.find(':') == std::string::npos) {
        throw InvalidArgument(fmt::format(
            "reference '{}' needs a tag; pass REGISTRY/REPO:TAG, e.g. myacr.azurecr.io/tools:1.0",
            ref));
    }
    if (!std::filesystem::is_regular_file(archive)) {
        throw InvalidArgument(fmt::format("{} is not a readable archive file", archive.string()));
    }
    std::filesystem::create_directories(dir_ / "blobs");
    const auto blob = dir_ / "blobs" / (new_guid() + ".tar");
    std::filesystem::copy_file(archive, blob);
    auto index = read_index(dir_ / "index.json");
    if (auto* old = index.if_contains(ref); old != nullptr && old->is_string()) {
        std::error_code ignored;
        std::filesystem::remove(dir_ / "blobs" / std::string(old->as_string()), ignored);
    }
    index[ref] = blob.filename().string();
    net::write_file_atomically(dir_ / "index.json", json::serialize(index), 0600);
}

std::optional<std::filesystem::path> RegistryStandIn::find(const std::string& ref) const {
    const auto index = read_index(dir_ / "index.json");
    if (auto* v = index.if_contains(ref); v != nullptr && v->is_string()) {
        const auto blob = dir_ / "blobs" / std::string(v->as_string());
        if (std::filesystem::is_regular_file(blob)) {
            return blob;
        }
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::emulator
