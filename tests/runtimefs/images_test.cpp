#include "maf_sandbox/runtime/host/images.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "maf_sandbox/core/errors.hpp"
#include "tar_builder.hpp"
#include "temp_dir.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace fs = std::filesystem;
using testing::TarBuilder;
using testing::TempDir;

std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
}

const std::string kPasswd =
    "root:x:0:0:root:/root:/bin/sh\napp:x:1001:1002:app:/home/app:/bin/sh\n";
const std::string kGroup = "root:x:0:\nstaff:x:50:app\n";
const std::string kConfig =
    R"({"architecture":"amd64","os":"linux","config":{"User":"app","Env":["PATH=/usr/bin:/bin","FOO=bar=baz"],"WorkingDir":"/srv"}})";

std::string layer_one() {
    return TarBuilder(true)
        .dir("etc")
        .file("etc/passwd", kPasswd)
        .file("etc/group", kGroup)
        .file("a/keep", "keep")
        .file("a/gone", "gone")
        .file("b/old1", "old")
        .dir("b/olddir")
        .file("b/olddir/x", "x")
        .finish();
}

std::string layer_two() {
    return TarBuilder()
        .file("a/.wh.gone", "")
        .file("b/.wh..wh..opq", "")
        .file("b/new", "new")
        .file("c/added", "added")
        .finish();
}

class ImageStoreTest : public ::testing::Test {
  protected:
    ImageStoreTest() : store(temp.path() / "state") {}

    void expect_no_leftovers() {
        for (const auto& entry : fs::directory_iterator(store.images_dir())) {
            EXPECT_FALSE(entry.path().filename().string().starts_with(".import-")) << entry.path();
        }
    }

    TempDir temp;
    ImageStore store;
};

TEST_F(ImageStoreTest, ARootfsTarballImportsAndResolves) {
    const auto archive = temp.path() / "rootfs.tar";
    TarBuilder()
        .file("./etc/passwd", kPasswd)
        .file("./bin/tool", "#!/bin/sh\n", 0755)
        .symlink("./usr/bin/tool", "/bin/tool")
        .hardlink("./bin/tool2", "./bin/tool")
        .write_to(archive);
    const auto info = store.import(archive, "demo:1");
    EXPECT_EQ(info.source, "rootfs-tarball");
    EXPECT_EQ(slurp(info.rootfs / "bin/tool"), "#!/bin/sh\n");
    EXPECT_EQ(fs::read_symlink(info.rootfs / "usr/bin/tool"), "/bin/tool");
    EXPECT_EQ(fs::hard_link_count(info.rootfs / "bin/tool"), 2u);
    const auto plan = store.resolve("demo:1");
    EXPECT_EQ(plan.lower_dir, info.rootfs);
    EXPECT_TRUE(plan.ro_binds.empty());
    EXPECT_EQ(plan.uid, 0u);
    EXPECT_EQ(plan.env.at("PATH").empty(), false);
    const auto images = store.list();
    ASSERT_EQ(images.size(), 2u);
    EXPECT_EQ(images[0].ref.name, "host");
    EXPECT_EQ(images[1].ref.str(), "demo:1");
    EXPECT_THROW(store.import(archive, "demo:1"), InvalidArgument);
    expect_no_leftovers();
}

TEST_F(ImageStoreTest, AnOciLayoutAppliesLayersInOrderWithWhiteouts) {
    const auto archive = temp.path() / "oci.tar";
    const std::string manifest =
        R"({"schemaVersion":2,"config":{"digest":"sha256:c0"},"layers":[{"digest":"sha256:l1"},{"digest":"sha256:l2"}]})";
    TarBuilder()
        .file("oci-layout", R"({"imageLayoutVersion":"1.0.0"})")
        .file("index.json", R"({"schemaVersion":2,"manifests":[{"digest":"sha256:m0"}]})")
        .file("blobs/sha256/m0", manifest)
        .file("blobs/sha256/c0", kConfig)
        .file("blobs/sha256/l1", layer_one())
        .file("blobs/sha256/l2", layer_two())
        .write_to(archive);
    const auto info = store.import(archive, "library/app:v2");
    EXPECT_EQ(info.source, "oci-layout");
    const auto& root = info.rootfs;
    EXPECT_TRUE(fs::exists(root / "a/keep"));
    EXPECT_FALSE(fs::exists(root / "a/gone"));
    EXPECT_FALSE(fs::exists(root / "a/.wh.gone"));
    EXPECT_FALSE(fs::exists(root / "b/old1"));
    EXPECT_FALSE(fs::exists(root / "b/olddir"));
    EXPECT_FALSE(fs::exists(root / "b/.wh..wh..opq"));
    EXPECT_EQ(slurp(root / "b/new"), "new");
    EXPECT_EQ(slurp(root / "c/added"), "added");
    const auto plan = store.resolve("library/app:v2");
    EXPECT_EQ(plan.uid, 1001u);
    EXPECT_EQ(plan.gid, 1002u);
    EXPECT_EQ(plan.user_name, "app");
    EXPECT_EQ(plan.env.at("FOO"), "bar=baz");
    EXPECT_EQ(plan.workdir, "/srv");
    store.remove("library/app:v2");
    EXPECT_THROW(store.resolve("library/app:v2"), InvalidArgument);
    EXPECT_EQ(store.list().size(), 1u);
}

TEST_F(ImageStoreTest, ADockerSaveArchiveImportsWithItsConfig) {
    const auto archive = temp.path() / "saved.tar";
    TarBuilder()
        .file(
            "manifest.json",
            R"([{"Config":"cfg.json","RepoTags":["app:1"],"Layers":["l1/layer.tar","l2/layer.tar"]}])")
        .file("cfg.json", kConfig)
        .file("l1/layer.tar", layer_one())
        .file("l2/layer.tar", layer_two())
        .write_to(archive);
    const auto info = store.import(archive, "saved");
    EXPECT_EQ(info.ref.str(), "saved:latest");
    EXPECT_EQ(info.source, "docker-save");
    EXPECT_FALSE(fs::exists(info.rootfs / "a/gone"));
    EXPECT_EQ(store.resolve("saved").uid, 1001u);
}

// An image's author writes its config; the CLI prints User and WorkingDir in `images list` and
// in errors, so a terminal escape there would reach the operator's terminal.
TEST_F(ImageStoreTest, AConfigCarryingTerminalEscapesIsRefusedNamingTheField) {
    const auto saved = [&](const std::string& name, const std::string& config) {
        const auto archive = temp.path() / (name + ".tar");
        TarBuilder()
            .file("manifest.json",
                  R"([{"Config":"cfg.json","RepoTags":["app:1"],"Layers":["l1/layer.tar"]}])")
            .file("cfg.json", config)
            .file("l1/layer.tar", layer_one())
            .write_to(archive);
        return archive;
    };
    // The control: a config with a tab in an Env value and non-ASCII text imports.
    const auto fine = saved(
        "fine", R"({"config":{"User":"app","Env":["A=x\ty","B=caf\u00e9"],"WorkingDir":"/srv"}})");
    EXPECT_EQ(store.import(fine, "fine").workdir, "/srv");
    const std::vector<std::pair<std::string, std::string>> cases{
        {"User", R"({"config":{"User":"1000\u001b]0;PWNED\u0007"}})"},
        {"WorkingDir", R"({"config":{"WorkingDir":"/srv\u001b[2J"}})"},
        {"Env", R"({"config":{"Env":["PS=\u009b31m"]}})"},
        {"Env", R"({"config":{"Env":["DEL=\u007f"]}})"},
    };
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const auto& [field, config] = cases[i];
        const auto name = "esc" + std::to_string(i);
        try {
            store.import(saved(name, config), name);
            ADD_FAILURE() << field << " with a control character was imported";
        } catch (const InvalidArgument& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        }
        EXPECT_THROW(store.resolve(name), InvalidArgument) << name;
    }
    expect_no_leftovers();
}

TEST_F(ImageStoreTest, EscapingArchivesAreRefusedAndLeaveNothing) {
    const auto outside = temp.path() / "outside";
    fs::create_directories(outside);
    struct Case {
        const char* name;
        std::string tar;
    };
    const std::vector<Case> cases{
        {"dotdot", TarBuilder().file("ok", "x").file("../escaped", "x").finish()},
        {"absolute", TarBuilder().file("/escaped-abs", "x").finish()},
        {"through-link",
         TarBuilder().symlink("evil", outside.string()).file("evil/escaped", "x").finish()},
        {"relative-link",
         TarBuilder().symlink("evil", "../../../../outside").file("evil/escaped", "x").finish()},
        {"hardlink-dotdot", TarBuilder().hardlink("h", "../../../etc/passwd").finish()},
        {"hardlink-abs", TarBuilder().hardlink("h", "/etc/passwd").finish()},
    };
    for (const auto& c : cases) {
        const auto archive = temp.path() / (std::string(c.name) + ".tar");
        std::ofstream(archive, std::ios::binary) << c.tar;
        EXPECT_THROW(store.import(archive, std::string("bad-") + c.name), InvalidArgument)
            << c.name;
        EXPECT_THROW(store.resolve(std::string("bad-") + c.name), InvalidArgument) << c.name;
    }
    EXPECT_TRUE(fs::is_empty(outside));
    EXPECT_FALSE(fs::exists(temp.path() / "escaped"));
    EXPECT_FALSE(fs::exists("/escaped-abs"));
    EXPECT_EQ(store.list().size(), 1u);
    expect_no_leftovers();
}

TEST_F(ImageStoreTest, AWhiteoutThroughALinkIsRefused) {
    const auto outside = temp.path() / "outside";
    fs::create_directories(outside / "victim");
    const auto archive = temp.path() / "wh.tar";
    TarBuilder()
        .file("manifest.json", R"([{"Layers":["l1.tar","l2.tar"]}])")
        .file("l1.tar", TarBuilder().symlink("evil", outside.string()).finish())
        .file("l2.tar", TarBuilder().file("evil/.wh.victim", "").finish())
        .write_to(archive);
    EXPECT_THROW(store.import(archive, "wh"), InvalidArgument);
    EXPECT_TRUE(fs::exists(outside / "victim"));
}

TEST_F(ImageStoreTest, UnknownImagesAndBadReferencesSayWhatToDo) {
    try {
        store.resolve("nope:1");
        FAIL();
    } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("unknown image 'nope:1'"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("maf-sandbox images list"), std::string::npos);
    }
    EXPECT_THROW(parse_image_ref("UPPER"), InvalidArgument);
    EXPECT_THROW(parse_image_ref("a/../b"), InvalidArgument);
    EXPECT_THROW(parse_image_ref("name:"), InvalidArgument);
    EXPECT_THROW(parse_image_ref(""), InvalidArgument);
    EXPECT_EQ(parse_image_ref("registry/x/y:1.0").name, "registry/x/y");
    EXPECT_THROW(store.remove("host"), InvalidArgument);
    EXPECT_THROW(store.remove("nope"), InvalidArgument);
    EXPECT_THROW(store.import(temp.path() / "missing.tar", "x"), InvalidArgument);
    const auto junk = temp.path() / "junk.tar";
    std::ofstream(junk) << "this is not a tar archive at all";
    EXPECT_THROW(store.import(junk, "junk"), InvalidArgument);
}

TEST_F(ImageStoreTest, TheHostImageIsASkeletonWithReadOnlyHostBinds) {
    const auto plan = store.resolve("host");
    EXPECT_EQ(plan.uid, kHostImageUid);
    EXPECT_EQ(plan.workdir, "/maf-sandbox/work");
    EXPECT_NE(slurp(plan.lower_dir / "etc/passwd").find("sandbox:x:1000:1000"), std::string::npos);
    EXPECT_TRUE(fs::is_directory(plan.lower_dir / "usr"));
    EXPECT_TRUE(fs::is_directory(plan.lower_dir / "proc"));
    EXPECT_EQ(fs::status(plan.lower_dir / "tmp").permissions() & fs::perms::sticky_bit,
              fs::perms::sticky_bit);
    bool usr = false;
    for (const auto& bind : plan.ro_binds) {
        usr |= bind.host_path == "/usr" && bind.guest_path == "/usr";
        // Every bind has its mount point in the skeleton already.
        EXPECT_TRUE(fs::exists(fs::symlink_status(plan.lower_dir / bind.guest_path.substr(1))))
            << bind.guest_path;
    }
    EXPECT_TRUE(usr);
    // /bin on a merged-/usr host is a link in the skeleton, never a bind.
    if (fs::is_symlink("/bin")) {
        EXPECT_TRUE(fs::is_symlink(plan.lower_dir / "bin"));
    }
    // Idempotent: a second resolve reuses the skeleton.
    EXPECT_EQ(store.resolve("host:latest").lower_dir, plan.lower_dir);
}

}  // namespace
}  // namespace maf_sandbox::runtime
