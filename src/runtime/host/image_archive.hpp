// Reading image archives for the image store (images.cpp): root filesystem tarballs and the
// layers of `docker save` and OCI layout archives, applied to a root through GuestFs (never
// following a link the archive holds), and the outer archives' manifests.
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <boost/json/value.hpp>

#include "import_budget.hpp"
#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::runtime::image_archive {

namespace fs = std::filesystem;

struct ReadArchive {
    archive* handle = archive_read_new();
    ReadArchive() = default;
    ReadArchive(const ReadArchive&) = delete;
    ReadArchive& operator=(const ReadArchive&) = delete;
    ~ReadArchive() { archive_read_free(handle); }
};

// Opens a tar archive (any compression). Throws InvalidArgument naming what it accepts.
std::unique_ptr<ReadArchive> open_archive(const fs::path& path);

// Walks every entry; `visit` returns nothing and may read the entry's data.
template <typename Visit>
void for_each_entry(archive* reader, const fs::path& path, Visit&& visit) {
    for (;;) {
        archive_entry* entry = nullptr;
        const int status = archive_read_next_header(reader, &entry);
        if (status == ARCHIVE_EOF) {
            return;
        }
        if (status < ARCHIVE_WARN) {
            throw InvalidArgument(fmt::format("'{}' is not a readable tar archive: {}",
                                              path.string(), archive_error_string(reader)));
        }
        visit(entry);
    }
}

// A tar member name as a clean relative path ("" for the archive's root entry). Throws
// InvalidArgument for an absolute name or `..` anywhere.
std::string clean_member(std::string_view raw, const fs::path& archive_path);

// Applies one layer tarball to `rootfs` (whiteouts honoured when `honour_whiteouts`), charging
// every entry and byte to `budget` before it is written.
void apply_layer(const fs::path& layer, const fs::path& rootfs, bool honour_whiteouts,
                 ImportBudget& budget);

// Extracts the outer archive's regular files into `dir` (names validated, links ignored),
// charged to `budget` the same way.
void extract_outer(const fs::path& archive_path, const fs::path& dir, ImportBudget& budget);

// A JSON file of the staged archive; InvalidArgument when it is not JSON.
boost::json::value read_json(const fs::path& path);
const boost::json::value* member(const boost::json::value& value, std::string_view key);
std::string string_member(const boost::json::value& value, std::string_view key);

struct ImageLayout {
    std::string source;
    std::vector<fs::path> layers;
    boost::json::value config;
};

// The layers and config of a staged `docker save` archive, or of a staged OCI layout.
ImageLayout read_docker_save(const fs::path& staged);
ImageLayout read_oci_layout(const fs::path& staged);

}  // namespace maf_sandbox::runtime::image_archive
