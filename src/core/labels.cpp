#include "maf_sandbox/core/labels.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <memory>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox {
namespace {

constexpr std::string_view kHashedPrefix = "sha256-";
constexpr std::size_t kHashedHexDigits = 48;

bool is_label_safe(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

std::string sha256_hex(std::string_view data) {
    std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
    unsigned int length = 0;
    const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                          &EVP_MD_CTX_free);
    if (!context || EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) != 1 ||
        EVP_DigestUpdate(context.get(), data.data(), data.size()) != 1 ||
        EVP_DigestFinal_ex(context.get(), digest.data(), &length) != 1) {
        // Only an out-of-memory or a broken OpenSSL gets here; a label must never be truncated
        // instead, so refuse loudly.
        throw Error(
            "computing a SHA-256 label digest failed in OpenSSL; check the OpenSSL install");
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(length * 2);
    for (unsigned int i = 0; i < length; ++i) {
        hex += kHex[digest[i] >> 4];
        hex += kHex[digest[i] & 0x0f];
    }
    return hex;
}

}  // namespace

std::string label_value(std::string_view raw) {
    // A value that already looks hashed is hashed again, so a caller cannot forge a digest that
    // collides with another value's label.
    const bool keep = raw.size() <= kMaxLabelValueLength && !raw.starts_with(kHashedPrefix) &&
                      std::all_of(raw.begin(), raw.end(), is_label_safe);
    if (keep) {
        return std::string(raw);
    }
    return std::string(kHashedPrefix) + sha256_hex(raw).substr(0, kHashedHexDigits);
}

bool is_identity_label(std::string_view name) {
    return std::find(kIdentityLabels.begin(), kIdentityLabels.end(), name) != kIdentityLabels.end();
}

std::map<std::string, std::string> sandbox_labels(const SandboxKey& key, const SandboxSpec& spec) {
    std::map<std::string, std::string> labels;
    for (const auto& [name, value] : spec->labels) {
        labels[name] = label_value(value);
    }
    // Identity labels are written last: a spec's extra labels can never overwrite the labels that
    // disposal selects on.
    labels.erase(std::string(identity_label::call));
    for (auto& [name, value] : key_selector(key, spec->kind)) {
        labels[name] = std::move(value);
    }
    return labels;
}

std::map<std::string, std::string> scope_selector(std::string_view scope,
                                                  std::string_view thread_id) {
    return {{std::string(identity_label::scope), label_value(scope)},
            {std::string(identity_label::thread), label_value(thread_id)}};
}

std::map<std::string, std::string> key_selector(const SandboxKey& key,
                                                const std::optional<std::string>& kind) {
    auto labels = scope_selector(key.scope, key.thread_id);
    labels[std::string(identity_label::agent)] = label_value(key.agent_dir);
    if (!key.call_id.empty()) {
        labels[std::string(identity_label::call)] = label_value(key.call_id);
    }
    if (kind) {
        labels[std::string(identity_label::kind)] = label_value(*kind);
    }
    return labels;
}

bool labels_match_key(const std::map<std::string, std::string>& labels, const SandboxKey& key,
                      const std::optional<std::string>& kind) {
    for (const auto& [name, value] : key_selector(key, kind)) {
        const auto it = labels.find(name);
        if (it == labels.end() || it->second != value) {
            return false;
        }
    }
    return !key.call_id.empty() || labels.count(std::string(identity_label::call)) == 0;
}

}  // namespace maf_sandbox
