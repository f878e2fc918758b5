#include "image_archive.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <boost/json/parse.hpp>

#include "../kernel/fd_ops.hpp"
#include "maf_sandbox/runtime/kernel/guest_fs.hpp"

namespace maf_sandbox::runtime::image_archive {

namespace json = boost::json;

namespace {

constexpr std::size_t kMaxJsonBytes = 16 << 20;

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
// reaches it. Inside a sandbox nothing is lost: image files belong to host
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
                 const std::string& guest_path, const fs::path& layer, ImportBudget& budget) {
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
            // The file's apparent size so far: holes count too, as a copy of it would fill them.
            std::uint64_t charged = 0;
            const auto charge_to = [&](std::uint64_t end) {
                if (end > charged) {
                    budget.bytes(end - charged, guest_path);
                    charged = end;
                }
            };
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
                charge_to(static_cast<std::uint64_t>(offset) + size);
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
            if (archive_entry_size_is_set(entry)) {
                charge_to(
                    static_cast<std::uint64_t>(std::max<la_int64_t>(archive_entry_size(entry), 0)));
            }
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

}  // namespace

// --- libarchive owners -------------------------------------------------------------------------

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

// Applies one layer onto `rootfs`: first its whiteouts (which hide what lower layers put there,
// never what this layer adds), then its entries.
void apply_layer(const fs::path& layer, const fs::path& rootfs, bool honour_whiteouts,
                 ImportBudget& budget) {
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
    // A bad name or a link among the parents is the archive's doing; a file-system refusal (too
    // many hard links to one file, a name too long) is said as the kernel said it.
    const auto refuse = [&](const std::string& raw, const Error& e, bool escape) {
        return InvalidArgument(fmt::format(
            "layer '{}': entry '{}' refused: {}{}", layer.filename().string(), raw, e.what(),
            escape ? "; the archive tries to write outside the image or through a link" : ""));
    };
    for_each_entry(reader->handle, layer, [&](archive_entry* entry) {
        const std::string raw = archive_entry_pathname(entry);
        const auto path = clean_member(raw, layer);
        if (path.empty() || (honour_whiteouts && base_name(path).starts_with(kWhiteoutPrefix))) {
            return;
        }
        budget.entry(path);
        const auto guest_path = "/" + path;
        try {
            place_entry(guest, reader->handle, entry, guest_path, layer, budget);
        } catch (const SystemError&) {
            throw;
        } catch (const ImageImportLimitExceeded&) {
            throw;
        } catch (const InvalidArgument& e) {
            throw refuse(raw, e, true);
        } catch (const FileError& e) {
            throw refuse(raw, e, false);
        }
    });
}

// --- image archives (docker save, OCI layout) ---------------------------------------------------

// Extracts the outer archive's regular files into `dir` (names validated, links ignored).
void extract_outer(const fs::path& archive_path, const fs::path& dir, ImportBudget& budget) {
    auto reader = open_archive(archive_path);
    const auto staged_tree = GuestFs::open(dir, GuestOwner{0, 0});
    for_each_entry(reader->handle, archive_path, [&](archive_entry* entry) {
        const auto path = clean_member(archive_entry_pathname(entry), archive_path);
        if (path.empty() || archive_entry_filetype(entry) != AE_IFREG ||
            archive_entry_hardlink(entry) != nullptr) {
            return;
        }
        budget.entry(path);
        // A tree we build ourselves, but through the same confined layer: a name can never be
        // written through a link (the outer archive's links are not extracted at all).
        const auto fd = staged_tree.create_file("/" + path, 0600);
        std::uint64_t charged = 0;
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
            if (const auto end = static_cast<std::uint64_t>(offset) + size; end > charged) {
                budget.bytes(end - charged, path);
                charged = end;
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

}  // namespace maf_sandbox::runtime::image_archive
