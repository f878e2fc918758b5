// A temporary directory for one test under /tmp, removed with everything in it however the test
// ends (std::filesystem::remove_all never follows a link out of it). Every test folder uses this
// one (some under a folder-local alias such as StateDir); a prefix, where a test passes one, says
// whose a leftover is. Made by mkdtemp, so 0700: a test's helper process must not need to enter it.
#pragma once

#include <stdlib.h>
#include <sys/types.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

namespace maf_sandbox::testing {

class TempDir {
  public:
    explicit TempDir(std::string_view prefix = "maf-test") {
        std::string pattern = "/tmp/" + std::string(prefix) + "-XXXXXX";
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
        }
        path_ = pattern;
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    const std::filesystem::path& path() const { return path_; }

    // Writes `content` to `name` in the directory with permissions `mode`; returns its path.
    std::string write(const std::string& name, const std::string& content,
                      unsigned mode = 0644) const {
        const auto file = path_ / name;
        std::ofstream(file, std::ios::binary | std::ios::trunc) << content;
        std::filesystem::permissions(file, static_cast<std::filesystem::perms>(mode));
        return file.string();
    }

  private:
    std::filesystem::path path_;
};

}  // namespace maf_sandbox::testing
