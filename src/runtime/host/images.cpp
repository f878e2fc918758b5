// The image store: image references, the store's layout and metadata, and resolving an image to a
// mount plan. Reading archives is image_archive.cpp's; the host image's skeleton,
// host_skeleton.cpp's.
#include "maf_sandbox/runtime/host/images.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <cerrno>
#include <chrono>
#include <memory>
#include <set>
#include <sstream>

#include "../kernel/fd_ops.hpp"
#include "host_skeleton.hpp"
#include "image_archive.hpp"
#include "image_staging.hpp"
#include "import_budget.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/guest_fs.hpp"
#include "maf_sandbox/runtime/kernel/state_dir.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

using namespace image_archive;
using namespace host_skeleton;

constexpr const char* kMetadataFile = "image.json";
constexpr const char* kDefaultWorkDirForHost = "/maf-sandbox/work";
constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

bool valid_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

std::string storage_name(const std::string& name) {
    std::string out = name;
    std::replace(out.begin(), out.end(), '/', '+');
    return out;
}

// --- metadata ----------------------------------------------------------------------------------

json::value info_to_json(const ImageInfo& info) {
    json::object env;
    for (const auto& [key, value] : info.env) {
        env[key] = value;
    }
    return json::object{{"name", info.ref.name},
                        {"tag", info.ref.tag},
                        {"source", info.source},
                        {"user", info.user},
                        {"env", std::move(env)},
                        {"workdir", info.workdir},
                        {"created_at", info.created_at_unix}};
}

ImageInfo info_from_json(const json::value& value, const fs::path& dir) {
    ImageInfo info;
    info.ref.name = string_member(value, "name");
    info.ref.tag = string_member(value, "tag");
    info.source = string_member(value, "source");
    info.user = string_member(value, "user");
    info.workdir = string_member(value, "workdir");
    info.rootfs = dir / "rootfs";
    if (const auto* env = member(value, "env"); env && env->is_object()) {
        for (const auto& [key, item] : env->get_object()) {
            if (item.is_string()) {
                info.env.emplace(std::string(key), std::string(item.get_string()));
            }
        }
    }
    if (const auto* created = member(value, "created_at"); created && created->is_number()) {
        info.created_at_unix = created->to_number<std::uint64_t>();
    }
    return info;
}

// True when `text` holds a terminal control character: C0 but tab, DEL, or a C1 control in
// UTF-8 (U+0080..U+009F, whose CSI opens the same escapes as ESC [).
bool has_control_character(std::string_view text) {
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto byte = static_cast<unsigned char>(text[i]);
        if ((byte < 0x20 && byte != '\t') || byte == 0x7f) {
            return true;
        }
        if (byte == 0xc2 && i + 1 < text.size()) {
            const auto next = static_cast<unsigned char>(text[i + 1]);
            if (next >= 0x80 && next <= 0x9f) {
                return true;
            }
        }
    }
    return false;
}

// The image's author wrote these strings, and the CLI prints them in tables and errors: a
// control character would reach the operator's terminal as an escape (retitle, clear, write the
// clipboard), so an image that carries one is refused at import, naming the field.
std::string config_text(std::string value, std::string_view field) {
    if (has_control_character(value)) {
        throw InvalidArgument(fmt::format(
            "the image config's {} holds a control character; such an image is refused, because "
            "its strings are printed to terminals (rebuild it without control characters)",
            field));
    }
    return value;
}

// The image config's User, Env and WorkingDir (all optional).
void take_config(const json::value& image_config, ImageInfo& info) {
    const auto* config = member(image_config, "config");
    if (config == nullptr) {
        return;
    }
    info.user = config_text(string_member(*config, "User"), "User");
    info.workdir = config_text(string_member(*config, "WorkingDir"), "WorkingDir");
    if (const auto* env = member(*config, "Env"); env && env->is_array()) {
        for (const auto& item : env->get_array()) {
            if (!item.is_string()) {
                continue;
            }
            const auto text = config_text(std::string(item.get_string()), "Env");
            const auto eq = text.find('=');
            if (eq != std::string::npos && eq > 0) {
                info.env[text.substr(0, eq)] = text.substr(eq + 1);
            }
        }
    }
}

// Removes a staging directory unless released.
class StagingDir {
  public:
    explicit StagingDir(fs::path path) : path_(std::move(path)) {
        if (::mkdir(path_.c_str(), 0700) != 0) {
            throw SystemError(errno,
                              fmt::format("creating staging directory '{}'", path_.string()));
        }
    }
    StagingDir(const StagingDir&) = delete;
    StagingDir& operator=(const StagingDir&) = delete;
    ~StagingDir() {
        if (!path_.empty()) {
            try {
                detail::remove_host_tree(path_, true);
            } catch (...) {
                // Best effort: gc-like cleanup of `.import-*` leftovers is safe to repeat.
            }
        }
    }
    const fs::path& path() const noexcept { return path_; }
    void release() noexcept { path_.clear(); }

  private:
    fs::path path_;
};

// An import's `.import-*` directory, held by this process while it unpacks (image_staging.hpp)
// and removed, still held, unless released once it is moved into place. A process killed on the
// way leaves it unheld, for the next sweep.
class ImportStaging {
  public:
    ImportStaging(int images_fd, const fs::path& images_dir)
        : images_fd_(images_fd),
          held_(image_staging::HeldDir::create(images_fd, image_staging::kImportPrefix)),
          path_(images_dir / held_.name()) {}
    ImportStaging(const ImportStaging&) = delete;
    ImportStaging& operator=(const ImportStaging&) = delete;
    ~ImportStaging() {
        if (!released_) {
            try {
                detail::remove_tree_at(images_fd_, held_.name(), true, "the image store");
            } catch (...) {
                // Left unheld once this object is gone: the next sweep removes it.
            }
        }
    }
    const fs::path& path() const noexcept { return path_; }
    const std::string& name() const noexcept { return held_.name(); }
    int fd() const noexcept { return held_.fd(); }
    void release() noexcept {
        released_ = true;
        held_.release();
    }

  private:
    int images_fd_;
    image_staging::HeldDir held_;
    fs::path path_;
    bool released_ = false;
};

std::uint64_t now_unix() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

// A directory of the image store we just made, opened without following a link, so its mode is
// changed through the descriptor.
struct OwnDir {
    UniqueFd fd;
    void chmod(mode_t mode) const {
        if (::fchmod(fd.get(), mode) != 0) {
            throw SystemError(errno, "setting the mode of a staging directory");
        }
    }
};
OwnDir open_own_dir(const fs::path& path) {
    UniqueFd fd{::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
    if (!fd) {
        throw SystemError(errno, fmt::format("opening '{}'", path.string()));
    }
    return OwnDir{std::move(fd)};
}

// Holds an exclusive flock on a file for the scope.
class FileLock {
  public:
    explicit FileLock(const fs::path& path)
        : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) {
        if (!fd_) {
            throw SystemError(errno, fmt::format("opening lock '{}'", path.string()));
        }
        while (::flock(fd_.get(), LOCK_EX) != 0) {
            if (errno != EINTR) {
                throw SystemError(errno, fmt::format("locking '{}'", path.string()));
            }
        }
    }

  private:
    UniqueFd fd_;
};

bool is_number(const std::string& text) {
    return !text.empty() &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Parses the image's /etc/passwd or /etc/group (read without following links out of the rootfs).
std::optional<std::pair<unsigned, unsigned>> lookup_colon_file(const fs::path& rootfs,
                                                               const std::string& file,
                                                               const std::string& name) {
    std::string text;
    try {
        text = GuestFs::open(rootfs, GuestOwner{}).read(file, 4 << 20);
    } catch (const FileError&) {
        return std::nullopt;
    } catch (const InvalidArgument&) {
        return std::nullopt;
    } catch (const SandboxOutputError&) {
        return std::nullopt;
    }
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        std::vector<std::string> fields;
        std::istringstream parts(line);
        std::string part;
        while (std::getline(parts, part, ':')) {
            fields.push_back(part);
        }
        if (fields.size() >= 3 && fields[0] == name) {
            try {
                const auto id = static_cast<unsigned>(std::stoul(fields[2]));
                return std::make_pair(id, fields.size() > 3 && is_number(fields[3])
                                              ? static_cast<unsigned>(std::stoul(fields[3]))
                                              : id);
            } catch (const std::exception&) {
                return std::nullopt;
            }
        }
    }
    return std::nullopt;
}

}  // namespace

ImageRef parse_image_ref(std::string_view text) {
    if (text.empty()) {
        throw InvalidArgument("the image name is empty; use NAME[:TAG], e.g. python:3.11");
    }
    ImageRef ref;
    const auto colon = text.rfind(':');
    const auto slash = text.rfind('/');
    std::string_view name = text;
    if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
        name = text.substr(0, colon);
        ref.tag = std::string(text.substr(colon + 1));
    }
    const bool tag_ok = !ref.tag.empty() && ref.tag.size() <= 128 && ref.tag.front() != '.' &&
                        ref.tag.front() != '-' &&
                        std::all_of(ref.tag.begin(), ref.tag.end(), [](char c) {
                            return (c >= 'A' && c <= 'Z') || valid_name_char(c);
                        });
    if (!tag_ok) {
        throw InvalidArgument(
            fmt::format("image tag '{}' in '{}' is not valid; a tag is 1 to 128 characters of A-Z "
                        "a-z 0-9 _ . - "
                        "and starts with a letter, digit or _",
                        ref.tag, text));
    }
    std::size_t start = 0;
    while (start <= name.size()) {
        const auto end = std::min(name.find('/', start), name.size());
        const auto part = name.substr(start, end - start);
        const bool ok = !part.empty() && part != "." && part != ".." &&
                        std::isalnum(static_cast<unsigned char>(part.front())) &&
                        std::all_of(part.begin(), part.end(), valid_name_char);
        if (!ok || name.size() > 255) {
            throw InvalidArgument(fmt::format(
                "image name '{}' is not valid; use lowercase a-z 0-9 . _ - in '/'-separated parts, "
                "each starting with a letter or digit",
                name));
        }
        start = end + 1;
    }
    ref.name = std::string(name);
    return ref;
}

ImageStore::ImageStore(fs::path state_dir)
    : state_dir_(fs::absolute(std::move(state_dir)).lexically_normal()),
      images_dir_(state_dir_ / "images") {
    // 0700: no host user but root reaches an image's files (a supervisor opens its layers as
    // root, before it becomes the sandbox's own host uid). One another user controls is refused
    // (state_dir.hpp).
    detail::make_state_dir(state_dir_, 0700);
    images_fd_ = open_trusted_state_dir(images_dir_, 0700);
}

ImageSweepReport ImageStore::sweep() const {
    try {
        return image_staging::sweep(images_fd_.get());
    } catch (const Error& e) {
        ImageSweepReport report;
        report.errors.push_back(fmt::format("sweeping the image store: {}", e.what()));
        return report;
    }
}

fs::path ImageStore::image_dir(const ImageRef& ref) const {
    return images_dir_ / storage_name(ref.name) / ref.tag;
}

ImageInfo ImageStore::import(const fs::path& archive_path, std::string_view ref_text,
                             const ImportLimits& limits) {
    const auto ref = parse_image_ref(ref_text);
    if (ref.name == kHostImage) {
        throw InvalidArgument(
            "'host' is the built-in image and cannot be imported over; choose "
            "another name");
    }
    const auto final_dir = image_dir(ref);
    struct stat st {};
    if (::lstat(final_dir.c_str(), &st) == 0) {
        throw InvalidArgument(
            fmt::format("image '{}' already exists; remove it first with "
                        "`maf-sandbox images rm {}`",
                        ref.str(), ref.str()));
    }
    if (::stat(archive_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        throw InvalidArgument(fmt::format("archive '{}' is not a readable file; check the path",
                                          archive_path.string()));
    }

    // What imports and removals that died left behind goes before this one adds to the store.
    (void)sweep();

    // What kind of archive: look at the top-level names only.
    std::set<std::string> top;
    {
        auto reader = open_archive(archive_path);
        for_each_entry(reader->handle, archive_path, [&](archive_entry* entry) {
            const char* raw = archive_entry_pathname(entry);
            std::string_view name = raw == nullptr ? "" : raw;
            while (name.starts_with("./")) {
                name.remove_prefix(2);
            }
            if (name.find('/') == std::string_view::npos) {
                top.emplace(name);
            }
        });
    }

    ImportStaging staging{images_fd_.get(), images_dir_};
    image_archive::ImportBudget budget{limits, staging.fd()};
    const auto rootfs = staging.path() / "rootfs";
    if (::mkdir(rootfs.c_str(), 0755) != 0) {
        throw SystemError(errno, fmt::format("creating '{}'", rootfs.string()));
    }
    const auto real_rootfs = fs::canonical(rootfs);

    ImageInfo info;
    info.ref = ref;
    info.created_at_unix = now_unix();
    const bool docker = top.count("manifest.json") > 0;
    const bool oci = top.count("oci-layout") > 0 && top.count("index.json") > 0;
    if (docker || oci) {
        const auto staged = staging.path() / "archive";
        if (::mkdir(staged.c_str(), 0700) != 0) {
            throw SystemError(errno, fmt::format("creating '{}'", staged.string()));
        }
        extract_outer(archive_path, staged, budget);
        auto layout = docker ? read_docker_save(staged) : read_oci_layout(staged);
        info.source = layout.source;
        take_config(layout.config, info);
        for (const auto& layer : layout.layers) {
            apply_layer(layer, real_rootfs, true, budget);
        }
        detail::remove_host_tree(staged, true);
    } else {
        info.source = "rootfs-tarball";
        apply_layer(archive_path, real_rootfs, false, budget);
    }
    if (info.env.find("PATH") == info.env.end()) {
        info.env["PATH"] = kDefaultPath;
    }
    detail::write_file_durably(staging.path() / kMetadataFile, json::serialize(info_to_json(info)),
                               0644);
    open_own_dir(staging.path()).chmod(0755);

    const auto name = storage_name(ref.name);
    // A removal of the name's last other tag may remove its directory meanwhile: made again once.
    for (int attempt = 0;; ++attempt) {
        if (::mkdirat(images_fd_.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
            throw SystemError(errno,
                              fmt::format("creating '{}'", final_dir.parent_path().string()));
        }
        UniqueFd name_fd{::openat(images_fd_.get(), name.c_str(),
                                  O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
        if (!name_fd || ::renameat(images_fd_.get(), staging.name().c_str(), name_fd.get(),
                                   ref.tag.c_str()) != 0) {
            if (errno == ENOENT && attempt == 0) {
                continue;
            }
            if (errno == EEXIST || errno == ENOTEMPTY) {
                throw InvalidArgument(
                    fmt::format("image '{}' was imported concurrently; remove it "
                                "first with `maf-sandbox images rm {}`",
                                ref.str(), ref.str()));
            }
            throw SystemError(
                errno, fmt::format("moving the imported image into '{}'", final_dir.string()));
        }
        break;
    }
    staging.release();
    info.rootfs = final_dir / "rootfs";
    return info;
}

std::vector<ImageInfo> ImageStore::list() const {
    std::vector<ImageInfo> images;
    ImageInfo host;
    host.ref = ImageRef{kHostImage, kDefaultTag};
    host.builtin = true;
    host.source = "host";
    host.rootfs = images_dir_ / "host" / "rootfs";
    host.user = kHostImageUser;
    host.workdir = kDefaultWorkDirForHost;
    images.push_back(host);
    std::vector<ImageInfo> imported;
    std::error_code error;
    for (const auto& name_dir : fs::directory_iterator(images_dir_, error)) {
        const auto name = name_dir.path().filename().string();
        if (name.starts_with(".") || name == kHostImage || !name_dir.is_directory()) {
            continue;
        }
        std::error_code inner;
        for (const auto& tag_dir : fs::directory_iterator(name_dir.path(), inner)) {
            const auto metadata = tag_dir.path() / kMetadataFile;
            try {
                imported.push_back(info_from_json(read_json(metadata), tag_dir.path()));
            } catch (const Error&) {
                continue;  // half-removed or damaged: not an image
            }
        }
    }
    std::sort(imported.begin(), imported.end(),
              [](const ImageInfo& a, const ImageInfo& b) { return a.ref.str() < b.ref.str(); });
    images.insert(images.end(), imported.begin(), imported.end());
    return images;
}

void ImageStore::remove(std::string_view ref_text) {
    const auto ref = parse_image_ref(ref_text);
    if (ref.name == kHostImage) {
        throw InvalidArgument("'host' is the built-in image and cannot be removed");
    }
    const auto unknown = [&] {
        return InvalidArgument(
            fmt::format("unknown image '{}'; run `maf-sandbox images list` to "
                        "see the images there are",
                        ref.str()));
    };
    (void)sweep();
    const auto name = storage_name(ref.name);
    const auto doomed = std::string(image_staging::kRemovePrefix) + detail::random_hex(8);
    std::optional<image_staging::HeldDir> held;
    {
        // Held from before the move aside to the end, so a sweep never takes it from us; moved
        // aside first so a concurrent resolve never sees a half-removed image.
        const image_staging::StoreLock store(images_fd_.get(), false);
        UniqueFd name_fd{::openat(images_fd_.get(), name.c_str(),
                                  O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
        if (!name_fd) {
            throw unknown();
        }
        try {
            held = image_staging::HeldDir::try_hold(name_fd.get(), ref.tag);
        } catch (const SystemError&) {
            throw unknown();
        }
        if (!held) {
            throw InvalidArgument(fmt::format(
                "image '{}' is being removed by another process; list the images once it is done",
                ref.str()));
        }
        struct stat st {};
        if (::fstatat(held->fd(), kMetadataFile, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            throw unknown();
        }
        if (::renameat(name_fd.get(), ref.tag.c_str(), images_fd_.get(), doomed.c_str()) != 0) {
            throw SystemError(errno, fmt::format("removing image '{}'", ref.str()));
        }
    }
    try {
        detail::remove_tree_at(images_fd_.get(), doomed, true, "the image store");
    } catch (const SystemError& e) {
        throw SystemError(e.error_number(),
                          fmt::format("removing the files of image '{}'", ref.str()),
                          "the image is out of the store already; `maf-sandbox gc`, the next "
                          "import or the next removal finishes removing its files");
    }
    ::unlinkat(images_fd_.get(), name.c_str(), AT_REMOVEDIR);  // only when no other tag is left
}

MountPlan ImageStore::resolve_host() const {
    const auto host_dir = images_dir_ / "host";
    const auto rootfs = host_dir / "rootfs";
    const auto version_file = host_dir / "skeleton-version";
    const auto current = [&] {
        try {
            return detail::read_host_file(version_file, 64) == kSkeletonVersion &&
                   fs::is_directory(rootfs);
        } catch (const Error&) {
            return false;
        }
    };
    if (!current()) {
        if (::mkdir(host_dir.c_str(), 0755) != 0 && errno != EEXIST) {
            throw SystemError(errno, fmt::format("creating '{}'", host_dir.string()));
        }
        FileLock lock{host_dir / ".lock"};
        if (!current()) {  // another process may have built it while we waited
            const auto building = host_dir / (".build-" + detail::random_hex(8));
            StagingDir guard{building};
            open_own_dir(building).chmod(0755);
            build_skeleton(building / "rootfs");
            if (fs::exists(rootfs)) {
                detail::remove_host_tree(rootfs, true);
            }
            if (::rename((building / "rootfs").c_str(), rootfs.c_str()) != 0) {
                throw SystemError(errno, fmt::format("installing '{}'", rootfs.string()));
            }
            ::unlink(version_file.c_str());
            ::rename((building / "skeleton-version").c_str(), version_file.c_str());
        }
    }
    MountPlan plan;
    plan.image = ImageRef{kHostImage, kDefaultTag}.str();
    plan.lower_dir = rootfs;
    plan.ro_binds.push_back({"/usr", "/usr"});
    for (const char* dir : kHostLibDirs) {
        struct stat host_st {};
        struct stat skeleton_st {};
        const auto host = fs::path("/") / dir;
        if (::lstat(host.c_str(), &host_st) == 0 && S_ISDIR(host_st.st_mode) &&
            ::lstat((rootfs / dir).c_str(), &skeleton_st) == 0 && S_ISDIR(skeleton_st.st_mode)) {
            plan.ro_binds.push_back({host, host.string()});
        }
    }
    for (const char* entry : kHostEtcBinds) {
        struct stat host_st {};
        struct stat skeleton_st {};
        const auto host = fs::path("/") / entry;
        if (::stat(host.c_str(), &host_st) == 0 &&
            ::lstat((rootfs / entry).c_str(), &skeleton_st) == 0 &&
            S_ISDIR(host_st.st_mode) == S_ISDIR(skeleton_st.st_mode)) {
            plan.ro_binds.push_back({host, host.string()});
        }
    }
    plan.uid = kHostImageUid;
    plan.gid = kHostImageGid;
    plan.user_name = kHostImageUser;
    plan.env = {{"PATH", kDefaultPath}, {"HOME", kDefaultWorkDirForHost}, {"LANG", "C.UTF-8"}};
    plan.workdir = kDefaultWorkDirForHost;
    return plan;
}

MountPlan ImageStore::resolve(std::string_view ref_text) const {
    const auto ref = parse_image_ref(ref_text);
    if (ref.name == kHostImage) {
        if (ref.tag != kDefaultTag) {
            throw InvalidArgument(
                fmt::format("unknown image '{}'; the built-in image is "
                            "'host' (host:latest)",
                            ref.str()));
        }
        return resolve_host();
    }
    const auto dir = image_dir(ref);
    ImageInfo info;
    try {
        info = info_from_json(read_json(dir / kMetadataFile), dir);
    } catch (const SystemError&) {
        throw InvalidArgument(
            fmt::format("unknown image '{}'; run `maf-sandbox images list` to see "
                        "the images there are, or import one with `maf-sandbox "
                        "images import ARCHIVE --name {}`",
                        ref.str(), ref.str()));
    }
    MountPlan plan;
    plan.image = ref.str();
    plan.lower_dir = info.rootfs;
    plan.env = info.env;
    plan.workdir = info.workdir;
    // User: "", "name", "uid", "name:group", "uid:gid"; names come from the image's own files.
    const auto colon = info.user.find(':');
    const auto user = info.user.substr(0, colon);
    const auto group = colon == std::string::npos ? std::string{} : info.user.substr(colon + 1);
    plan.user_name = is_number(user) ? std::string{} : user;
    if (user.empty()) {
        plan.uid = 0;
        plan.gid = 0;
    } else if (is_number(user)) {
        plan.uid = static_cast<uid_t>(std::stoul(user));
        plan.gid = plan.uid;
    } else {
        const auto found = lookup_colon_file(info.rootfs, "/etc/passwd", user);
        if (!found) {
            throw InvalidArgument(
                fmt::format("image '{}' runs as user '{}', which its /etc/passwd "
                            "does not define; re-import an image whose User "
                            "exists",
                            ref.str(), user));
        }
        plan.uid = found->first;
        plan.gid = found->second;
    }
    if (is_number(group)) {
        plan.gid = static_cast<gid_t>(std::stoul(group));
    } else if (!group.empty()) {
        const auto found = lookup_colon_file(info.rootfs, "/etc/group", group);
        if (!found) {
            throw InvalidArgument(
                fmt::format("image '{}' runs as group '{}', which its /etc/group "
                            "does not define",
                            ref.str(), group));
        }
        plan.gid = found->first;  // group file: name:x:gid:members, so the gid is field 3
    }
    return plan;
}

}  // namespace maf_sandbox::runtime
