#include "maf_sandbox/runtime/images.hpp"

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

#include "fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/guest_fs.hpp"
#include "maf_sandbox/runtime/registry.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr const char* kMetadataFile = "image.json";
// Bump when the skeleton's contents change: an old skeleton is rebuilt on next use.
constexpr const char* kSkeletonVersion = "1";
constexpr std::size_t kMaxJsonBytes = 16 << 20;
constexpr const char* kDefaultWorkDirForHost = "/maf-sandbox/work";
constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Host top-level directories that are either replicated as links (merged /usr) or bound.
constexpr std::array<const char*, 6> kHostLibDirs{"bin", "sbin", "lib", "lib32", "lib64", "libx32"};
// /etc entries bound read-only from the host when present (files or directories).
constexpr std::array<const char*, 4> kHostEtcBinds{"etc/ld.so.cache", "etc/ssl",
                                                   "etc/ca-certificates", "etc/alternatives"};

bool valid_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

std::string storage_name(const std::string& name) {
    std::string out = name;
    std::replace(out.begin(), out.end(), '/', '+');
    return out;
}

// --- libarchive owners -------------------------------------------------------------------------

struct ReadArchive {
    archive* handle = archive_read_new();
    ReadArchive() = default;
    ReadArchive(const ReadArchive&) = delete;
    ReadArchive& operator=(const ReadArchive&) = delete;
    ~ReadArchive() { archive_read_free(handle); }
};

std::unique_ptr<ReadArchive> open_archive(const fs::path& path) {
    auto reader = std::make_unique<ReadArchive>();
    archive_read_support_filter_all(reader->handle);
    archive_read_support_format_tar(reader->handle);
    archive_read_support_format_gnutar(reader->handle);
    if (archive_read_open_filename(reader->handle, path.c_str(), 1 << 16) != ARCHIVE_OK) {
        throw InvalidArgument(
            fmt::format("cannot read '{}' as a tar archive ({}); give a root "
                        "filesystem tarball, a `docker save` archive or an OCI "
                        "image layout archive",
                        path.string(), archive_error_string(reader->handle)));
    }
    return reader;
}

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

// A tar member name as a clean relative path ("" for the archive's root entry). Refuses absolute
// names and `..` anywhere, which could otherwise land outside the rootfs.
std::string clean_member(std::string_view raw, const fs::path& archive_path) {
    if (!raw.empty() && raw.front() == '/') {
        throw InvalidArgument(
            fmt::format("archive '{}' holds an absolute path '{}'; refused, "
                        "image archives hold relative paths only",
                        archive_path.string(), raw));
    }
    std::string out;
    std::size_t start = 0;
    while (start <= raw.size()) {
        const auto end = std::min(raw.find('/', start), raw.size());
        const auto part = raw.substr(start, end - start);
        if (part == "..") {
            throw InvalidArgument(
                fmt::format("archive '{}' holds a path with '..' ('{}'); refused, "
                            "it could land outside the image",
                            archive_path.string(), raw));
        }
        if (!part.empty() && part != ".") {
            if (!out.empty()) {
                out += '/';
            }
            out += part;
        }
        start = end + 1;
    }
    return out;
}

// --- layers ------------------------------------------------------------------------------------

constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kOpaqueMarker = ".wh..wh..opq";

std::string base_name(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}
std::string dir_name(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? std::string{} : path.substr(0, slash);
}

// The archive's permission bits an imported object keeps: all but set-user-id and set-group-id.
// On the host a set-id file owned by the archive's uid 0 is a root shell for any host user who
// reaches it (issue 17, class 2). Inside a sandbox nothing is lost: image files belong to host
// ids the sandbox's user namespace does not map, and the kernel ignores set-id bits of a file
// whose owner is unmapped (and the root is mounted nosuid besides). The sticky bit stays: a
// shared /tmp needs it inside.
constexpr mode_t kKeptModeBits = 07777 & ~(S_ISUID | S_ISGID);

// Owner, mode and times of a new object, through its descriptor only. chown first: it clears
// set-id bits, and the mode applied afterwards is the archive's without them.
void set_metadata(int fd, archive_entry* entry, bool set_mode) {
    if (::fchown(fd, static_cast<uid_t>(archive_entry_uid(entry)),
                 static_cast<gid_t>(archive_entry_gid(entry))) != 0) {
        throw SystemError(errno, "setting an image file's owner");
    }
    if (set_mode && ::fchmod(fd, archive_entry_perm(entry) & kKeptModeBits) != 0) {
        throw SystemError(errno, "setting an image file's mode");
    }
}

void set_times(int fd, archive_entry* entry) {
    if (!archive_entry_mtime_is_set(entry)) {
        return;
    }
    const timespec mtime{archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)};
    const timespec atime =
        archive_entry_atime_is_set(entry)
            ? timespec{archive_entry_atime(entry), archive_entry_atime_nsec(entry)}
            : mtime;
    const timespec times[2] = {atime, mtime};
    ::futimens(fd, times);  // best effort, as tar does
}

// Creates one archive entry at `guest_path` in the rootfs (see apply_layer).
void place_entry(const GuestFs& guest, archive* reader, archive_entry* entry,
                 const std::string& guest_path, const fs::path& layer) {
    if (const char* hardlink = archive_entry_hardlink(entry); hardlink != nullptr) {
        const auto target = clean_member(hardlink, layer);
        if (target.empty()) {
            throw InvalidArgument("the hard link names the image root");
        }
        guest.hard_link(guest_path, "/" + target);
        return;
    }
    switch (archive_entry_filetype(entry)) {
        case AE_IFDIR: {
            const auto dir = guest.replace_with_directory(guest_path);
            set_metadata(dir.get(), entry, true);
            return;
        }
        case AE_IFLNK: {
            const char* target = archive_entry_symlink(entry);
            guest.symlink(guest_path, target == nullptr ? "" : target, true);
            return;
        }
        case AE_IFREG: {
            const auto file = guest.create_file(guest_path, 0600);
            const void* block = nullptr;
            size_t size = 0;
            la_int64_t offset = 0;
            for (;;) {
                const int status = archive_read_data_block(reader, &block, &size, &offset);
                if (status == ARCHIVE_EOF) {
                    break;
                }
                if (status < ARCHIVE_WARN) {
                    throw InvalidArgument(
                        fmt::format("reading it failed: {}", archive_error_string(reader)));
                }
                for (std::size_t done = 0; done < size;) {
                    const ssize_t wrote =
                        ::pwrite(file.get(), static_cast<const char*>(block) + done, size - done,
                                 offset + static_cast<off_t>(done));
                    if (wrote < 0 && errno == EINTR) {
                        continue;
                    }
                    if (wrote <= 0) {
                        throw SystemError(errno,
                                          fmt::format("writing the image's '{}'", guest_path));
                    }
                    done += static_cast<std::size_t>(wrote);
                }
            }
            // A sparse tail (holes at the end) still counts toward the size.
            if (archive_entry_size_is_set(entry) &&
                ::ftruncate(file.get(), static_cast<off_t>(archive_entry_size(entry))) != 0) {
                throw SystemError(errno, fmt::format("sizing the image's '{}'", guest_path));
            }
            set_metadata(file.get(), entry, true);
            set_times(file.get(), entry);
            return;
        }
        default:
            return;  // device nodes, FIFOs and sockets never enter an image
    }
}

// Applies one layer onto `rootfs`: first its whiteouts (which hide what lower layers put there,
// never what this layer adds), then its entries.
void apply_layer(const fs::path& layer, const fs::path& rootfs, bool honour_whiteouts) {
    auto guest = GuestFs::open(rootfs, GuestOwner{0, 0});
    if (honour_whiteouts) {
        auto reader = open_archive(layer);
        for_each_entry(reader->handle, layer, [&](archive_entry* entry) {
            const auto path = clean_member(archive_entry_pathname(entry), layer);
            const auto name = base_name(path);
            if (!name.starts_with(kWhiteoutPrefix)) {
                return;
            }
            const auto parent = "/" + dir_name(path);
            try {
                if (name == kOpaqueMarker) {
                    if (auto kind = guest.stat(parent);
                        kind && kind->kind == EntryKind::directory) {
                        for (const auto& child : guest.list(parent)) {
                            guest.remove((parent == "/" ? "" : parent) + "/" + child.name, true);
                        }
                    }
                } else {
                    guest.remove(
                        (parent == "/" ? "" : parent) + "/" + name.substr(kWhiteoutPrefix.size()),
                        true);
                }
            } catch (const ConfinementEscape& e) {
                throw InvalidArgument(
                    fmt::format("layer '{}': whiteout '{}' goes through a link; "
                                "refused ({})",
                                layer.filename().string(), path, e.what()));
            }
        });
    }

    // Every entry is placed through GuestFs, fd-relative from the rootfs descriptor: parents are
    // resolved with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) and
    // made one component at a time, the final name is replaced (never written through), and
    // owner, mode and times are set on the new object's own descriptor. So no entry can write
    // through a link an earlier entry or layer planted: that is refused as a link among the
    // parents (ConfinementEscape), whatever libarchive's by-name checks would have said.
    auto reader = open_archive(layer);
    const auto refuse = [&](const std::string& raw, const Error& e) {
        return InvalidArgument(fmt::format(
            "layer '{}': entry '{}' refused: {}; the archive tries to write outside the image or "
            "through a link",
            layer.filename().string(), raw, e.what()));
    };
    for_each_entry(reader->handle, layer, [&](archive_entry* entry) {
        const std::string raw = archive_entry_pathname(entry);
        const auto path = clean_member(raw, layer);
        if (path.empty() || (honour_whiteouts && base_name(path).starts_with(kWhiteoutPrefix))) {
            return;
        }
        const auto guest_path = "/" + path;
        try {
            place_entry(guest, reader->handle, entry, guest_path, layer);
        } catch (const SystemError&) {
            throw;
        } catch (const InvalidArgument& e) {
            throw refuse(raw, e);
        } catch (const FileError& e) {
            throw refuse(raw, e);
        }
    });
}

// --- image archives (docker save, OCI layout) ---------------------------------------------------

// Extracts the outer archive's regular files into `dir` (names validated, links ignored).
void extract_outer(const fs::path& archive_path, const fs::path& dir) {
    auto reader = open_archive(archive_path);
    const auto staged_tree = GuestFs::open(dir, GuestOwner{0, 0});
    for_each_entry(reader->handle, archive_path, [&](archive_entry* entry) {
        const auto path = clean_member(archive_entry_pathname(entry), archive_path);
        if (path.empty() || archive_entry_filetype(entry) != AE_IFREG ||
            archive_entry_hardlink(entry) != nullptr) {
            return;
        }
        // A tree we build ourselves, but through the same confined layer: a name can never be
        // written through a link (the outer archive's links are not extracted at all).
        const auto fd = staged_tree.create_file("/" + path, 0600);
        const void* block = nullptr;
        size_t size = 0;
        la_int64_t offset = 0;
        for (;;) {
            const int status = archive_read_data_block(reader->handle, &block, &size, &offset);
            if (status == ARCHIVE_EOF) {
                break;
            }
            if (status < ARCHIVE_WARN) {
                throw InvalidArgument(fmt::format("reading '{}' from '{}': {}", path,
                                                  archive_path.string(),
                                                  archive_error_string(reader->handle)));
            }
            if (::pwrite(fd.get(), block, size, offset) != static_cast<ssize_t>(size)) {
                throw SystemError(errno, fmt::format("staging '{}' from the archive", path));
            }
        }
    });
}

json::value read_json(const fs::path& path) {
    try {
        return json::parse(detail::read_host_file(path, kMaxJsonBytes));
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        throw InvalidArgument(fmt::format("'{}' in the image archive is not valid JSON ({})",
                                          path.filename().string(), e.what()));
    }
}

const json::value* member(const json::value& value, std::string_view key) {
    return value.is_object() ? value.get_object().if_contains(key) : nullptr;
}

std::string string_member(const json::value& value, std::string_view key) {
    const auto* found = member(value, key);
    return found && found->is_string() ? std::string(found->get_string()) : std::string{};
}

// A blob path inside the staged archive, from "sha256:<hex>" or a relative path.
fs::path staged_path(const fs::path& staged, const std::string& reference) {
    const auto colon = reference.find(':');
    auto relative = colon == std::string::npos
                        ? reference
                        : "blobs/" + reference.substr(0, colon) + "/" + reference.substr(colon + 1);
    const auto clean = clean_member(relative, staged);
    const auto path = staged / clean;
    struct stat st {};
    if (clean.empty() || ::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        throw InvalidArgument(
            fmt::format("the image archive names '{}' but does not contain it; "
                        "re-export the image",
                        reference));
    }
    return path;
}

struct ImageLayout {
    std::string source;
    std::vector<fs::path> layers;
    json::value config;
};

ImageLayout read_docker_save(const fs::path& staged) {
    const auto manifest = read_json(staged / "manifest.json");
    if (!manifest.is_array() || manifest.get_array().empty()) {
        throw InvalidArgument("manifest.json of the `docker save` archive lists no image");
    }
    const auto& image = manifest.get_array().front();
    ImageLayout layout{"docker-save", {}, {}};
    if (const auto config = string_member(image, "Config"); !config.empty()) {
        layout.config = read_json(staged_path(staged, config));
    }
    const auto* layers = member(image, "Layers");
    if (layers == nullptr || !layers->is_array()) {
        throw InvalidArgument("manifest.json of the `docker save` archive has no Layers list");
    }
    for (const auto& layer : layers->get_array()) {
        if (!layer.is_string()) {
            throw InvalidArgument("manifest.json names a layer that is not a string");
        }
        layout.layers.push_back(staged_path(staged, std::string(layer.get_string())));
    }
    return layout;
}

ImageLayout read_oci_layout(const fs::path& staged) {
    auto document = read_json(staged / "index.json");
    // An index may point at further indexes (multi-platform); follow to the first image manifest,
    // preferring linux/amd64.
    for (int depth = 0; depth < 4; ++depth) {
        const auto* manifests = member(document, "manifests");
        if (manifests == nullptr || !manifests->is_array() || manifests->get_array().empty()) {
            break;
        }
        const json::value* chosen = &manifests->get_array().front();
        for (const auto& candidate : manifests->get_array()) {
            const auto* platform = member(candidate, "platform");
            if (platform && string_member(*platform, "os") == "linux" &&
                string_member(*platform, "architecture") == "amd64") {
                chosen = &candidate;
                break;
            }
        }
        document = read_json(staged_path(staged, string_member(*chosen, "digest")));
    }
    ImageLayout layout{"oci-layout", {}, {}};
    const auto* config = member(document, "config");
    if (config != nullptr) {
        layout.config = read_json(staged_path(staged, string_member(*config, "digest")));
    }
    const auto* layers = member(document, "layers");
    if (layers == nullptr || !layers->is_array()) {
        throw InvalidArgument("the OCI image manifest has no layers list; re-export the image");
    }
    for (const auto& layer : layers->get_array()) {
        layout.layers.push_back(staged_path(staged, string_member(layer, "digest")));
    }
    return layout;
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

// The image config's User, Env and WorkingDir (all optional).
void take_config(const json::value& image_config, ImageInfo& info) {
    const auto* config = member(image_config, "config");
    if (config == nullptr) {
        return;
    }
    info.user = string_member(*config, "User");
    info.workdir = string_member(*config, "WorkingDir");
    if (const auto* env = member(*config, "Env"); env && env->is_array()) {
        for (const auto& item : env->get_array()) {
            if (!item.is_string()) {
                continue;
            }
            const std::string text(item.get_string());
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

std::uint64_t now_unix() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

// --- the host skeleton -------------------------------------------------------------------------

// The skeleton is a tree we build ourselves in a fresh staging directory; it is still made
// through GuestFs, fd-relative from its root, like every tree the runtime writes.
void write_text(const GuestFs& tree, const std::string& path, std::string_view text,
                mode_t mode = 0644) {
    GuestWriteOptions options;
    options.mode = mode;
    tree.write(path, text, options);
}

void make_dir_mode(const GuestFs& tree, const std::string& path, mode_t mode) {
    const auto dir = tree.make_directory(path);
    if (::fchmod(dir.get(), mode) != 0) {
        throw SystemError(errno, fmt::format("setting the mode of the skeleton's '{}'", path));
    }
}

void build_skeleton(const fs::path& root) {
    if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
        throw SystemError(errno, fmt::format("creating '{}'", root.string()));
    }
    const auto tree = GuestFs::open(root, GuestOwner{0, 0});
    make_dir_mode(tree, "/", 0755);
    for (const char* dir :
         {"usr", "proc", "dev", "etc", "home", "run", "var", "mnt", "sys", "maf-sandbox"}) {
        make_dir_mode(tree, fmt::format("/{}", dir), 0755);
    }
    make_dir_mode(tree, "/tmp", 01777);
    make_dir_mode(tree, "/var/tmp", 01777);
    make_dir_mode(tree, "/root", 0700);
    for (const char* dir : kHostLibDirs) {
        const auto host = fs::path("/") / dir;
        struct stat st {};
        if (::lstat(host.c_str(), &st) != 0) {
            continue;
        }
        if (S_ISLNK(st.st_mode)) {  // merged /usr: /bin -> usr/bin, replicated as is
            std::error_code error;
            const auto target = fs::read_symlink(host, error);
            if (!error) {
                tree.symlink(fmt::format("/{}", dir), target.string());
            }
        } else if (S_ISDIR(st.st_mode)) {
            make_dir_mode(tree, fmt::format("/{}", dir), 0755);
        }
    }
    for (const char* entry : kHostEtcBinds) {
        const auto host = fs::path("/") / entry;
        struct stat st {};
        if (::stat(host.c_str(), &st) != 0) {
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            make_dir_mode(tree, fmt::format("/{}", entry), 0755);
        } else {
            write_text(tree, fmt::format("/{}", entry), "");
        }
    }
    write_text(tree, "/etc/passwd",
               fmt::format("root:x:0:0:root:/root:/bin/sh\n"
                           "{0}:x:{1}:{2}:{0}:/maf-sandbox/work:/bin/sh\n"
                           "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                           kHostImageUser, kHostImageUid, kHostImageGid));
    write_text(
        tree, "/etc/group",
        fmt::format("root:x:0:\n{0}:x:{1}:\nnogroup:x:65534:\n", kHostImageUser, kHostImageGid));
    write_text(tree, "/etc/hosts", "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost\n");
    write_text(tree, "/etc/hostname", "sandbox\n");
    write_text(tree, "/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n");
    write_text(tree, "/etc/resolv.conf", "");  // no network by default: nothing to resolve with
    detail::write_file_durably(root.parent_path() / "skeleton-version", kSkeletonVersion, 0644,
                               false);
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
    // root, before it becomes the sandbox's own host uid).
    make_private_state_dir(state_dir_);
    make_private_state_dir(images_dir_);
}

fs::path ImageStore::image_dir(const ImageRef& ref) const {
    return images_dir_ / storage_name(ref.name) / ref.tag;
}

ImageInfo ImageStore::import(const fs::path& archive_path, std::string_view ref_text) {
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

    StagingDir staging{images_dir_ / (".import-" + detail::random_hex(8))};
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
        extract_outer(archive_path, staged);
        auto layout = docker ? read_docker_save(staged) : read_oci_layout(staged);
        info.source = layout.source;
        take_config(layout.config, info);
        for (const auto& layer : layout.layers) {
            apply_layer(layer, real_rootfs, true);
        }
        detail::remove_host_tree(staged, true);
    } else {
        info.source = "rootfs-tarball";
        apply_layer(archive_path, real_rootfs, false);
    }
    if (info.env.find("PATH") == info.env.end()) {
        info.env["PATH"] = kDefaultPath;
    }
    detail::write_file_durably(staging.path() / kMetadataFile, json::serialize(info_to_json(info)),
                               0644);
    open_own_dir(staging.path()).chmod(0755);

    const auto name_dir = final_dir.parent_path();
    if (::mkdir(name_dir.c_str(), 0755) != 0 && errno != EEXIST) {
        throw SystemError(errno, fmt::format("creating '{}'", name_dir.string()));
    }
    if (::rename(staging.path().c_str(), final_dir.c_str()) != 0) {
        if (errno == EEXIST || errno == ENOTEMPTY) {
            throw InvalidArgument(
                fmt::format("image '{}' was imported concurrently; remove it "
                            "first with `maf-sandbox images rm {}`",
                            ref.str(), ref.str()));
        }
        throw SystemError(errno,
                          fmt::format("moving the imported image into '{}'", final_dir.string()));
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
    const auto dir = image_dir(ref);
    struct stat st {};
    if (::lstat((dir / kMetadataFile).c_str(), &st) != 0) {
        throw InvalidArgument(
            fmt::format("unknown image '{}'; run `maf-sandbox images list` to "
                        "see the images there are",
                        ref.str()));
    }
    // Move it aside first so a concurrent resolve never sees a half-removed image.
    const auto doomed = images_dir_ / (".remove-" + detail::random_hex(8));
    if (::rename(dir.c_str(), doomed.c_str()) != 0) {
        throw SystemError(errno, fmt::format("removing image '{}'", ref.str()));
    }
    detail::remove_host_tree(doomed, true);
    ::rmdir(dir.parent_path().c_str());  // only succeeds when no other tag is left
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
