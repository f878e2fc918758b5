// Images as an attack surface (issue 17, item 1). An imported image controls every name in
// its root filesystem; the host acts as root on that tree while it imports the image and while it
// builds a sandbox's root. Each case plants links (absolute, relative-climbing, dangling) where
// the builder needs a directory or a file, aimed at victims in the test's own temporary directory,
// and proves the victims are exactly as they were (content, mode, owner, no new entries) after
// the import and after the launch attempt. A benign control with the same paths and no links
// passes first. (Item 8, the host's layout in the guest's view, is host_layout_test.cpp.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>

#include "../runtimefs/tar_builder.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/kernel/mounts.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "security_fixture.hpp"

namespace maf_sandbox::security {
namespace {

using runtime::testing::TarBuilder;

// Everything under a host directory as the test made it: kind, mode, owner, bytes, link target.
using Snapshot = std::map<std::string, std::string>;

Snapshot snapshot(const fs::path& root) {
    Snapshot out;
    const auto describe = [](const fs::path& path) {
        struct stat st {};
        if (::lstat(path.c_str(), &st) != 0) {
            return std::string("missing");
        }
        std::string text = fmt::format("mode={:o} uid={} gid={}", st.st_mode, st.st_uid, st.st_gid);
        if (S_ISREG(st.st_mode)) {
            text += " content=" + slurp(path);
        } else if (S_ISLNK(st.st_mode)) {
            text += " link=" + fs::read_symlink(path).string();
        }
        return text;
    };
    out["."] = describe(root);
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
        out[fs::relative(entry.path(), root).string()] = describe(entry.path());
    }
    return out;
}

// Victims: a directory with the names the root builder writes, a lone file, and a bind source.
struct Victims {
    TempDir dir{"maf-sec-img-victims"};
    fs::path etc = dir.path() / "etc";
    fs::path file = dir.path() / "lone-file";
    Victims() {
        fs::create_directories(etc);
        for (const char* name : {"resolv.conf", "passwd", "group", "hosts"}) {
            spit(etc / name, fmt::format("VICTIM {}\napp:x:4242:4242::/:/bin/sh\n", name));
            ::chmod((etc / name).c_str(), 0640);
        }
        ::chmod(etc.c_str(), 0750);
        spit(file, "VICTIM lone file\n");
        ::chmod(file.c_str(), 0600);
    }
};

std::string probe_bytes() {
    return slurp(MAF_SECURITY_PROBE);
}

// A `docker save` archive whose layers are `layers` (each a tar built by the caller).
void write_docker_save(const fs::path& archive, const std::vector<std::string>& layers,
                       const std::string& user = "") {
    std::string names;
    TarBuilder outer;
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const auto name = fmt::format("l{}/layer.tar", i);
        names += fmt::format("{}\"{}\"", i == 0 ? "" : ",", name);
        outer.file(name, layers[i]);
    }
    outer.file("manifest.json",
               fmt::format(R"([{{"Config":"cfg.json","RepoTags":["x:1"],"Layers":[{}]}}])", names));
    outer.file("cfg.json", fmt::format(R"({{"config":{{"User":"{}","Env":["PATH=/"]}}}})", user));
    outer.write_to(archive);
}

// The benign base every case starts from: the directories the root builder touches, real.
TarBuilder& base_layer(TarBuilder& layer) {
    return layer.dir("etc")
        .file("etc/hostname", "imaged\n")
        .dir("maf-sandbox")
        .dir("maf-sandbox/work")
        .dir("tmp")
        .dir("proc")
        .dir("dev")
        .dir("mnt")
        .file("probe", probe_bytes(), 0755);
}

// Builds a sandbox root from `rootfs` exactly as a supervisor does (in a child of its own, whose
// private mount namespace ends with it) with every kind of path the builder touches: generated
// /etc files, a guest work dir, a read-only bind, /dev, /tmp, /proc, the old-root dir. Returns
// "ok" or the error's type and message.
std::string build_root(const fs::path& rootfs, const fs::path& scratch, const fs::path& bind) {
    runtime::RootPlan plan;
    plan.lower_dirs = {rootfs};
    plan.files = {{"/etc/resolv.conf", "nameserver 10.0.2.3\n", 0644},
                  {"/etc/passwd", "root:x:0:0::/:/bin/sh\n", 0644},
                  {"/etc/group", "root:x:0:\n", 0644},
                  {"/etc/hosts", "127.0.0.1 localhost\n", 0644}};
    plan.guest_dirs = {"/maf-sandbox/work"};
    plan.ro_binds = {{bind, "/mnt/bind"}};
    plan.disk_bytes = 16 << 20;
    plan.tmp_bytes = 4 << 20;
    plan.shm_bytes = 4 << 20;
    plan.root_uid = plan.guest_uid = 0;
    int out[2];
    if (::pipe(out) != 0) {
        return "pipe failed";
    }
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(out[0]);
        std::string verdict = "ok";
        try {
            runtime::prepare_root(plan, scratch);
        } catch (const Error& e) {
            verdict = fmt::format("{}: {}", e.type_name(), e.what());
        } catch (const std::exception& e) {
            verdict = fmt::format("exception: {}", e.what());
        }
        [[maybe_unused]] auto n = ::write(out[1], verdict.data(), verdict.size());
        ::_exit(0);
    }
    ::close(out[1]);
    std::string verdict;
    char buffer[4096];
    ssize_t got = 0;
    while ((got = ::read(out[0], buffer, sizeof buffer)) > 0) {
        verdict.append(buffer, static_cast<std::size_t>(got));
    }
    ::close(out[0]);
    ::waitpid(child, nullptr, 0);
    return verdict;
}

class MaliciousImage : public ::testing::Test {
  protected:
    MaliciousImage() : store(state.path()) {
        fs::create_directories(bind_source);
        spit(bind_source / "bound", "bound");
        fs::create_directories(scratch);
    }

    // Imports `layers` as a docker-save image; the ImageInfo, or the import's error.
    std::optional<runtime::ImageInfo> import(const std::vector<std::string>& layers,
                                             std::string* error = nullptr) {
        const auto archive = work.path() / fmt::format("image{}.tar", ++count);
        write_docker_save(archive, layers);
        try {
            return store.import(archive, fmt::format("evil:{}", count));
        } catch (const InvalidArgument& e) {
            if (error != nullptr) {
                *error = e.what();
            }
            return std::nullopt;
        }
    }

    void expect_untouched(const Snapshot& before, const std::string& what) {
        EXPECT_EQ(snapshot(victims.dir.path()), before) << what << " changed a host victim";
    }

    Victims victims;
    TempDir state{"maf-sec-img-state"};
    TempDir work{"maf-sec-img-work"};
    fs::path bind_source = work.path() / "bind-source";
    fs::path scratch = work.path() / "scratch";
    runtime::ImageStore store;
    int count = 0;
};

// The store's roots are never listable by another host user: made 0700, and an existing looser
// root (create_directories under the umask makes 0755) is tightened, both by the image store and by
// the sandbox registry; one other users could write (0777) is refused, as its records may be
// forged. Host uid 65534 in a forked child cannot list them.
// (state_store_modes_test.cpp proves a sandbox's own host uids cannot even traverse them.)
TEST_F(MaliciousImage, TheStateDirectorysRootsAreNeverListableByOtherHostUsers) {
    ASSERT_EQ(::chmod(work.path().c_str(), 0711), 0);
    const auto root = work.path() / "state";
    fs::create_directories(root / "images");
    fs::create_directories(root / "sandboxes");
    for (const auto& dir : {root, root / "images", root / "sandboxes"}) {
        ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
    }
    EXPECT_THROW(runtime::ImageStore{root}, SystemError);
    EXPECT_THROW(runtime::Registry{root}, SystemError);
    for (const auto& dir : {root, root / "images", root / "sandboxes"}) {
        ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
    }
    runtime::ImageStore loose_store(root);
    runtime::Registry registry(root);
    const auto mode_of = [](const fs::path& path) {
        struct stat st {};
        EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
        return st.st_mode & 07777;
    };
    for (const auto& dir : {root, root / "images", root / "sandboxes", root / "locks"}) {
        EXPECT_EQ(mode_of(dir), 0700u) << dir;
    }
    const pid_t child = ::fork();
    if (child == 0) {
        if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) {
            ::_exit(10);
        }
        for (const auto& dir : {root, root / "images", root / "sandboxes", root / "locks"}) {
            if (::open(dir.c_str(), O_RDONLY | O_DIRECTORY) >= 0 || errno != EACCES) {
                ::_exit(11);
            }
        }
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "10: could not become 65534; 11: a root was listable";
}

// --- the root builder
// -----------------------------------------------------------------------------

TEST_F(MaliciousImage, ControlABenignImageBuildsAWholeRoot) {
    TarBuilder layer;
    base_layer(layer).file("etc/passwd", "root:x:0:0::/:/bin/sh\n").dir(".oldroot");
    const auto info = import({layer.finish()});
    ASSERT_TRUE(info);
    EXPECT_EQ(build_root(info->rootfs, scratch, bind_source), "ok");
}

// Every place the builder needs a directory or writes a file, with each kind of link there.
TEST_F(MaliciousImage, LinksWhereTheRootBuilderWorksNeverReachTheHost) {
    struct Place {
        std::string path;  // in the image
        // The builder replaces the name (a generated file is renamed over a link, never written
        // through it) or covers it with a mount of its own (/dev/shm inside the runtime's /dev):
        // the root builds. Anywhere else the launch fails, naming the path.
        bool builds;
    };
    const std::vector<Place> places{{"etc", false},
                                    {"etc/resolv.conf", true},
                                    {"etc/passwd", true},
                                    {"etc/group", true},
                                    {"etc/hosts", true},
                                    {"maf-sandbox", false},
                                    {"maf-sandbox/work", false},
                                    {"tmp", false},
                                    {"proc", false},
                                    {"dev", false},
                                    {"dev/shm", true},
                                    {".oldroot", false},
                                    {"mnt", false},
                                    {"mnt/bind", false}};
    const auto before = snapshot(victims.dir.path());
    const std::vector<std::string> base{"etc", "maf-sandbox", "maf-sandbox/work", "tmp", "proc",
                                        "dev", "mnt"};
    for (const auto& place : places) {
        const std::string absolute = place.path.starts_with("etc/")
                                         ? (victims.etc / fs::path(place.path).filename()).string()
                                         : victims.etc.string();
        const std::vector<std::pair<std::string, std::string>> links{
            {"absolute", absolute},
            {"relative", "../../../../../../../../.." + absolute},
            {"dangling", victims.dir.path().string() + "/nothing-here/x"}};
        for (const auto& [kind, target] : links) {
            // The benign directories, except the link's place and what lies beneath it.
            TarBuilder layer;
            for (const auto& dir : base) {
                if (dir != place.path && !dir.starts_with(place.path + "/")) {
                    layer.dir(dir);
                }
            }
            layer.symlink(place.path, target);
            const auto info = import({layer.finish()});
            ASSERT_TRUE(info) << place.path << " " << kind;
            const auto verdict = build_root(info->rootfs, scratch, bind_source);
            const std::string what = fmt::format("a {} link at /{}", kind, place.path);
            if (place.builds) {
                EXPECT_EQ(verdict, "ok") << what;
            } else {
                EXPECT_TRUE(verdict.starts_with("InvalidArgument")) << what << ": " << verdict;
                EXPECT_NE(verdict.find("/" + place.path), std::string::npos)
                    << what << ": the error names the image path: " << verdict;
            }
            expect_untouched(before, what);
        }
    }
}

// --- import
// ---------------------------------------------------------------------------------------

TEST_F(MaliciousImage, ControlLayersReplaceEachOthersEntries) {
    TarBuilder one;
    one.dir("etc").file("etc/passwd", "one\n").symlink("lnk", "etc");
    TarBuilder two;
    two.file("etc/passwd", "two\n").dir("lnk").file("lnk/inside", "in\n");
    const auto info = import({one.finish(), two.finish()});
    ASSERT_TRUE(info);
    EXPECT_EQ(slurp(info->rootfs / "etc/passwd"), "two\n");
    EXPECT_TRUE(fs::is_directory(fs::symlink_status(info->rootfs / "lnk")));
    EXPECT_EQ(slurp(info->rootfs / "lnk/inside"), "in\n");
}

TEST_F(MaliciousImage, AnEntryThroughALinkAnEarlierLayerPlantedIsRefused) {
    const auto before = snapshot(victims.dir.path());
    for (const auto& target :
         {victims.etc.string(), "../../../../../../../../.." + victims.etc.string()}) {
        TarBuilder one;
        one.symlink("etc", target);
        TarBuilder two;
        two.file("etc/resolv.conf", "attacker\n").file("etc/new-file", "attacker\n");
        std::string error;
        EXPECT_FALSE(import({one.finish(), two.finish()}, &error)) << target;
        EXPECT_NE(error.find("link"), std::string::npos) << error;
        expect_untouched(before, "a layer writing through an earlier layer's link " + target);
    }
}

TEST_F(MaliciousImage, AnEntryThroughALinkAnEarlierEntryPlantedIsRefused) {
    const auto before = snapshot(victims.dir.path());
    TarBuilder layer;
    layer.symlink("etc", victims.etc.string()).file("etc/passwd", "attacker\n");
    EXPECT_FALSE(import({layer.finish()}));
    TarBuilder dir_then_file;
    dir_then_file.symlink("d", victims.dir.path().string()).dir("d/made-by-image");
    EXPECT_FALSE(import({dir_then_file.finish()}));
    TarBuilder link_then_link;
    link_then_link.symlink("d", victims.dir.path().string()).symlink("d/planted", "/");
    EXPECT_FALSE(import({link_then_link.finish()}));
    expect_untouched(before, "an entry writing through an earlier entry's link");
}

TEST_F(MaliciousImage, AHardLinkThroughALinkIsRefusedAndOneToALinkNeverReachesItsTarget) {
    const auto before = snapshot(victims.dir.path());
    TarBuilder through;
    through.symlink("v", victims.etc.string()).hardlink("h", "v/passwd");
    EXPECT_FALSE(import({through.finish()}));
    // A hard link to a link is a second name of the link; writing that name replaces it.
    TarBuilder to_link;
    to_link.symlink("v", (victims.etc / "passwd").string())
        .hardlink("h", "v")
        .file("h", "attacker\n");
    const auto info = import({to_link.finish()});
    ASSERT_TRUE(info);
    EXPECT_EQ(slurp(info->rootfs / "h"), "attacker\n");
    expect_untouched(before, "hard links");
}

TEST_F(MaliciousImage, ADirectoryReplacedByALinkKeepsTheHostDirectorysMode) {
    // libarchive once fixed up directory modes by name at the end, through a link that replaced
    // the directory meanwhile (CVE-2021-31566). Metadata now goes through the new object's fd.
    const auto before = snapshot(victims.dir.path());
    TarBuilder layer;
    layer.dir("d").symlink("d", victims.etc.string());
    const auto info = import({layer.finish()});
    ASSERT_TRUE(info);
    EXPECT_TRUE(fs::is_symlink(info->rootfs / "d"));
    expect_untouched(before, "a directory replaced by a link");
}

TEST_F(MaliciousImage, TheImagesUserIsLookedUpInItsOwnPasswdNeverThroughALink) {
    const auto archive = work.path() / "user.tar";
    TarBuilder layer;
    layer.dir("etc").symlink("etc/passwd", (victims.etc / "passwd").string());
    write_docker_save(archive, {layer.finish()}, "app");
    store.import(archive, "user:1");
    // The victim defines app as 4242; the image's passwd is only a link, so app is undefined.
    EXPECT_THROW(store.resolve("user:1"), InvalidArgument);
}

// --- launches through the local backend
// -----------------------------------------------------------

class MaliciousImageLaunch : public MaliciousImage {
  protected:
    std::shared_ptr<Sandbox> acquire(const std::string& image) {
        local::LocalBackendConfig config;
        config.state_dir = state.path();
        config.memory_bytes = 256ull << 20;
        config.pool_size = 0;
        backend = std::make_unique<local::LocalBackend>(config);
        SandboxSpecFields fields;
        fields.kind = "security";
        fields.image = image;
        key = SandboxKey{"security", fmt::format("img{}", ::getpid()), "agent", ""};
        return run_blocking(backend->acquire(key, SandboxSpec(fields)));
    }
    ~MaliciousImageLaunch() override {
        if (backend) {
            try {
                run_blocking(backend->dispose_scope(key.scope, key.thread_id));
            } catch (...) {
            }
        }
    }
    std::string probe_read(Sandbox& sandbox, const std::string& path) {
        ExecRequest request;
        request.command = Argv{"/probe", "read", path};
        request.timeout = kExecTimeout;
        const auto result = run_blocking(sandbox.exec(request));
        EXPECT_EQ(result.exit_code, 0) << result.stderr_bytes;
        return result.stdout_bytes;
    }

    std::unique_ptr<local::LocalBackend> backend;
    SandboxKey key;
};

TEST_F(MaliciousImageLaunch, ControlABenignImageLaunchesAndRuns) {
    TarBuilder layer;
    base_layer(layer);
    ASSERT_TRUE(import({layer.finish()}));
    const auto sandbox = acquire("evil:1");
    EXPECT_EQ(probe_read(*sandbox, "/etc/hostname"), "imaged\n");
}

// Issue 17, class 2: an archive's set-user-id root file must not become a host root shell in the
// store. The importer keeps owner and permission bits but never S_ISUID/S_ISGID (for a rootfs
// tarball and a docker-save image alike); the sticky bit of a shared directory stays. Inside the
// sandbox the file still exists and runs: its set-id bits meant nothing there anyway (the owner is
// a host id the sandbox's user namespace does not map).
TEST_F(MaliciousImageLaunch, AnImportedSetIdFileLosesItsSetIdBitsAndStillRunsInside) {
    TarBuilder layer;
    base_layer(layer)
        .dir("bin")
        .file("bin/suid-probe", probe_bytes(), 04755)
        .file("bin/sgid-probe", probe_bytes(), 02755)
        .dir("var")
        .dir("var/tmp", 01777)
        .dir("var/setgid-dir", 02775);
    const std::string tar = layer.finish();
    const auto tarball = work.path() / "setid-rootfs.tar";
    spit(tarball, tar);
    const auto info = import({tar});
    ASSERT_TRUE(info);
    const auto plain = store.import(tarball, "setid:rootfs");
    for (const auto* imported : {&*info, &plain}) {
        const auto mode_of = [&](const char* path) {
            struct stat st {};
            EXPECT_EQ(::lstat((imported->rootfs / path).c_str(), &st), 0) << path;
            return st.st_mode & 07777;
        };
        EXPECT_EQ(mode_of("bin/suid-probe"), 0755u) << imported->source;
        EXPECT_EQ(mode_of("bin/sgid-probe"), 0755u) << imported->source;
        EXPECT_EQ(mode_of("var/setgid-dir"), 0775u) << imported->source;
        EXPECT_EQ(mode_of("var/tmp"), 01777u) << imported->source;
        for (const auto& entry : fs::recursive_directory_iterator(imported->rootfs)) {
            struct stat st {};
            ASSERT_EQ(::lstat(entry.path().c_str(), &st), 0);
            EXPECT_EQ(st.st_mode & (S_ISUID | S_ISGID), 0u) << entry.path();
        }
    }
    const auto sandbox = acquire(info->ref.str());
    ExecRequest request;
    request.command = Argv{"/bin/suid-probe", "read", "/etc/hostname"};
    request.timeout = kExecTimeout;
    const auto result = run_blocking(sandbox->exec(request));
    EXPECT_EQ(result.exit_code, 0) << result.stderr_bytes;
    EXPECT_EQ(result.stdout_bytes, "imaged\n");
}

TEST_F(MaliciousImageLaunch, AWorkDirectoryBehindALinkFailsTheLaunchAndTouchesNothing) {
    const auto before = snapshot(victims.dir.path());
    for (const auto& [place, target] : std::vector<std::pair<std::string, std::string>>{
             {"maf-sandbox", victims.dir.path().string()},
             {"maf-sandbox", "../../../../../../../.." + victims.dir.path().string()},
             {"tmp", victims.dir.path().string()},
             {".oldroot", victims.dir.path().string()}}) {
        TarBuilder layer;
        layer.dir("etc").file("probe", probe_bytes(), 0755).symlink(place, target);
        if (place != "maf-sandbox") {
            layer.dir("maf-sandbox").dir("maf-sandbox/work");
        }
        const auto info = import({layer.finish()});
        ASSERT_TRUE(info);
        try {
            acquire(info->ref.str());
            ADD_FAILURE() << "a launch with a link at /" << place << " succeeded";
        } catch (const InvalidArgument& e) {
            EXPECT_NE(std::string(e.what()).find("/" + place), std::string::npos) << e.what();
        }
        backend.reset();
        expect_untouched(before, "launching with a link at /" + place);
    }
}

}  // namespace
}  // namespace maf_sandbox::security
