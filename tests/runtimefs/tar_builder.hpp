// Builds tar archives in memory, entry by entry, with libarchive: image layers, rootfs tarballs
// and the `docker save` / OCI layout archives around them (image tests, malicious-image tests).
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace maf_sandbox::runtime::testing {

// Builds a tar archive in memory, entry by entry, with libarchive.
class TarBuilder {
  public:
    explicit TarBuilder(bool gzip = false) {
        archive_write_set_format_pax_restricted(writer_);
        if (gzip) {
            archive_write_add_filter_gzip(writer_);
        }
        archive_write_open_memory(writer_, buffer_.data(), buffer_.size(), &used_);
    }
    ~TarBuilder() { archive_write_free(writer_); }

    TarBuilder& file(const std::string& name, const std::string& content, int mode = 0644) {
        return add(name, AE_IFREG, mode, content, nullptr, nullptr);
    }
    TarBuilder& dir(const std::string& name, int mode = 0755) {
        return add(name, AE_IFDIR, mode, "", nullptr, nullptr);
    }
    TarBuilder& symlink(const std::string& name, const std::string& target) {
        return add(name, AE_IFLNK, 0777, "", target.c_str(), nullptr);
    }
    TarBuilder& hardlink(const std::string& name, const std::string& target) {
        return add(name, AE_IFREG, 0644, "", nullptr, target.c_str());
    }
    std::string finish() {
        archive_write_close(writer_);
        return std::string(buffer_.data(), used_);
    }
    void write_to(const std::filesystem::path& path) {
        std::ofstream(path, std::ios::binary) << finish();
    }

  private:
    TarBuilder& add(const std::string& name, unsigned type, int mode, const std::string& content,
                    const char* symlink, const char* hardlink) {
        archive_entry* entry = archive_entry_new();
        archive_entry_set_pathname(entry, name.c_str());
        archive_entry_set_filetype(entry, type);
        archive_entry_set_perm(entry, mode);
        archive_entry_set_size(entry, static_cast<la_int64_t>(content.size()));
        if (symlink) {
            archive_entry_set_symlink(entry, symlink);
        }
        if (hardlink) {
            archive_entry_set_hardlink(entry, hardlink);
            archive_entry_set_size(entry, 0);
        }
        archive_write_header(writer_, entry);
        if (!content.empty()) {
            archive_write_data(writer_, content.data(), content.size());
        }
        archive_entry_free(entry);
        return *this;
    }

    archive* writer_ = archive_write_new();
    std::vector<char> buffer_ = std::vector<char>(8 << 20);
    size_t used_ = 0;
};

}  // namespace maf_sandbox::runtime::testing
