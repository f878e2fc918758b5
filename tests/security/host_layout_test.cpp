// Item 8 of issue 17: the host's layout stays private. A guest of each image kind the runtime has
// (the built-in host image, whose /usr and friends come from the host's own disk, and an imported
// root filesystem tarball) reads its mount tables, PID 1's command line and the kernel files that
// name disks; none may name the state directory, the image store, the test's temporary
// directories, a host mount point, a host block device (its path, its major:minor, its file
// system's type or options) or the host kernel's command line. What counts as the host's is read
// from the host's own /proc/self/mountinfo and /proc/cmdline, and the control proves first that
// the same check flags the host's own view.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <set>

#include "../runtimefs/tar_builder.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "security_fixture.hpp"

namespace maf_sandbox::security {
namespace {

using runtime::testing::TarBuilder;

// One line of /proc/<pid>/mountinfo (proc(5)): the fields this test reads.
struct MountLine {
    std::string device;  // major:minor
    std::string root;
    std::string point;
    std::string type;
    std::string source;
    std::string super_options;
};

std::vector<MountLine> parse_mountinfo(const std::string& text) {
    std::vector<MountLine> lines;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string id;
        std::string parent;
        std::string options;
        MountLine parsed;
        fields >> id >> parent >> parsed.device >> parsed.root >> parsed.point >> options;
        std::string field;
        while (fields >> field && field != "-") {  // optional fields, up to the separator
        }
        fields >> parsed.type >> parsed.source >> parsed.super_options;
        if (!parsed.type.empty()) {
            lines.push_back(std::move(parsed));
        }
    }
    return lines;
}

// What of the host a guest must never see.
struct HostLayout {
    std::vector<std::string> names;       // host paths and device paths, found anywhere
    std::set<std::string> devices;        // major:minor of each host file system on a block device
    std::set<std::string> fs_types;       // their types (e.g. ext4), and the host's devtmpfs
    std::set<std::string> super_options;  // their options (matched as a whole mount field)
    std::string kernel_cmdline;           // the host's /proc/cmdline, without its newline
};

bool under_kernel_dirs(const std::string& point) {
    for (const char* dir : {"/proc", "/sys", "/dev"}) {
        const std::string_view prefix(dir);
        if (point == prefix || (point.starts_with(prefix) && point[prefix.size()] == '/')) {
            return true;
        }
    }
    return false;
}

// The host as this test process sees it, plus the directories this run made (`private_dirs`).
HostLayout host_layout(const std::vector<std::string>& private_dirs) {
    HostLayout host;
    host.names = private_dirs;
    for (const auto& line : parse_mountinfo(slurp("/proc/self/mountinfo"))) {
        if (line.source.starts_with("/dev/")) {
            host.devices.insert(line.device);
            host.fs_types.insert(line.type);
            host.names.push_back(line.source);
            host.super_options.insert(line.super_options);
        }
        if (line.type == "devtmpfs") {
            host.fs_types.insert(line.type);
            host.super_options.insert(line.super_options);  // carries the host's memory size
        }
        // A host mount point a guest has no reason to show (a guest's own are /, /proc, /dev...).
        if (line.point.find('/', 1) != std::string::npos && !under_kernel_dirs(line.point)) {
            host.names.push_back(line.point);
        }
    }
    host.kernel_cmdline = slurp("/proc/cmdline");
    while (!host.kernel_cmdline.empty() && host.kernel_cmdline.back() == '\n') {
        host.kernel_cmdline.pop_back();
    }
    return host;
}

// How a guest file is read: a mountinfo table, a mounts table (source point type options), or text.
enum class Format { mountinfo, mounts, text };

// Every way `text` shows the host.
std::vector<std::string> leaks(const std::string& text, const HostLayout& host, Format format) {
    std::vector<std::string> found;
    for (const auto& name : host.names) {
        if (!name.empty() && text.find(name) != std::string::npos) {
            found.push_back("names " + name);
        }
    }
    if (!host.kernel_cmdline.empty() && text.find(host.kernel_cmdline) != std::string::npos) {
        found.push_back("holds the host kernel's command line");
    }
    std::vector<MountLine> lines;
    if (format == Format::mountinfo) {
        lines = parse_mountinfo(text);
    } else if (format == Format::mounts) {
        std::istringstream in(text);
        for (std::string line; std::getline(in, line);) {
            MountLine parsed;
            std::istringstream(line) >> parsed.source >> parsed.point >> parsed.type;
            lines.push_back(std::move(parsed));
        }
    }
    for (const auto& line : lines) {
        if (!line.device.empty() && host.devices.contains(line.device)) {
            found.push_back(fmt::format("{} is on the host's device {}", line.point, line.device));
        }
        if (host.fs_types.contains(line.type)) {
            found.push_back(fmt::format("{} shows the host's {}", line.point, line.type));
        }
        if (host.super_options.contains(line.super_options)) {
            found.push_back(
                fmt::format("{} shows the host's options {}", line.point, line.super_options));
        }
    }
    return found;
}

std::string joined(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& item : items) {
        out += "\n  " + item;
    }
    return out;
}

// The files a guest reads here, and how each is read.
const std::vector<std::pair<std::string, Format>> kGuestViews{
    {"/proc/self/mountinfo", Format::mountinfo},
    {"/proc/1/mountinfo", Format::mountinfo},
    {"/proc/self/mounts", Format::mounts},
    {"/proc/1/cmdline", Format::text},
    {"/proc/cmdline", Format::text},
    {"/proc/partitions", Format::text},
    {"/proc/diskstats", Format::text},
    {"/proc/sys/kernel/random/boot_id", Format::text}};

TEST(HostLayoutPrivacy, ControlTheCheckFindsTheHostsLayoutInTheHostsOwnView) {
    const auto host = host_layout({});
    ASSERT_FALSE(host.devices.empty()) << "the host shows no file system on a block device";
    const auto mountinfo = slurp("/proc/self/mountinfo");
    EXPECT_FALSE(leaks(mountinfo, host, Format::mountinfo).empty()) << mountinfo;
    EXPECT_FALSE(leaks(slurp("/proc/self/mounts"), host, Format::mounts).empty());
    if (!host.kernel_cmdline.empty()) {
        EXPECT_FALSE(leaks(slurp("/proc/cmdline"), host, Format::text).empty());
    }
    // The host has per-disk entries under /proc/fs (ext4, jbd2, xfs) that a guest must not list.
    EXPECT_FALSE(fs::is_empty("/proc/fs"));
    EXPECT_FALSE(slurp("/proc/sys/kernel/random/boot_id").empty());
}

TEST(HostLayoutPrivacy, AHostImageGuestSeesNothingOfTheHostsLayout) {
    Box box;
    const auto host = host_layout({box.state().string(), (box.state() / "images").string(),
                                   fs::path(MAF_SECURITY_PROBE).parent_path().string()});
    for (const auto& [file, format] : kGuestViews) {
        const auto read = box.sh("cat " + file);
        ASSERT_EQ(read.exit_code, 0) << file << ": " << read.stderr_bytes;
        EXPECT_EQ(leaks(read.stdout_bytes, host, format), std::vector<std::string>{})
            << file << " shows the host:" << joined(leaks(read.stdout_bytes, host, format)) << "\n"
            << read.stdout_bytes;
    }
    const auto mountinfo = box.sh("cat /proc/self/mountinfo").stdout_bytes;
    // The host's directories are still served, read-only: /usr is a mount of its own.
    bool usr_mounted = false;
    for (const auto& line : parse_mountinfo(mountinfo)) {
        usr_mounted = usr_mounted || line.point == "/usr";
    }
    EXPECT_TRUE(usr_mounted) << mountinfo;
    EXPECT_NE(box.sh("touch /usr/.maf-write-probe").exit_code, 0);
    EXPECT_EQ(box.sh("tr '\\0' ' ' < /proc/1/cmdline").stdout_bytes, "maf-sandbox-supervisor ");
    EXPECT_EQ(box.sh("cat /proc/cmdline /proc/partitions").stdout_bytes, "");
    // /proc/fs is there and empty (no ext4/<disk>/options, no mb_groups), and stays read-only.
    const auto proc_fs = box.sh("ls -A /proc/fs; cat /proc/fs/ext4/*/options 2>/dev/null");
    EXPECT_EQ(proc_fs.stdout_bytes, "");
    EXPECT_NE(box.sh("touch /proc/fs/planted").exit_code, 0);
    EXPECT_EQ(box.sh("cat /proc/sys/kernel/random/boot_id").stdout_bytes, "");
    // The devices and the copied host file still work.
    EXPECT_EQ(box.sh("echo lost > /dev/null && head -c 16 /dev/urandom | wc -c").stdout_bytes,
              "16\n");
    struct stat cache {};
    if (::stat("/etc/ld.so.cache", &cache) == 0) {
        EXPECT_EQ(box.sh("wc -c < /etc/ld.so.cache").stdout_bytes,
                  fmt::format("{}\n", cache.st_size));
    }
}

TEST(HostLayoutPrivacy, AnImportedImageGuestSeesNothingOfTheHostsLayout) {
    TempDir state{"maf-sec-layout-state"};
    TempDir work{"maf-sec-layout-work"};
    const auto archive = work.path() / "rootfs.tar";
    TarBuilder layer;
    layer.dir("etc")
        .file("etc/hostname", "imaged\n")
        .dir("maf-sandbox")
        .dir("maf-sandbox/work")
        .dir("tmp")
        .file("probe", slurp(MAF_SECURITY_PROBE), 0755);
    layer.write_to(archive);
    runtime::ImageStore store(state.path());
    const auto info = store.import(archive, "layout:1");
    const auto host =
        host_layout({state.path().string(), store.images_dir().string(), work.path().string(),
                     info.rootfs.string(), fs::path(MAF_SECURITY_PROBE).parent_path().string()});

    local::LocalBackendConfig config;
    config.state_dir = state.path();
    config.memory_bytes = 256ull << 20;
    config.pool_size = 0;
    local::LocalBackend backend(config);
    SandboxSpecFields fields;
    fields.kind = "security";
    fields.image = "layout:1";
    const SandboxKey key{"security", fmt::format("layout{}", ::getpid()), "agent", ""};
    const auto sandbox = run_blocking(backend.acquire(key, SandboxSpec(fields)));
    const auto cat = [&](const std::string& file) {
        ExecRequest request;
        request.command = Argv{"/probe", "cat", file};
        request.timeout = kExecTimeout;
        const auto result = run_blocking(sandbox->exec(request));
        EXPECT_EQ(result.exit_code, 0) << file << ": " << result.stderr_bytes;
        EXPECT_EQ(result.stdout_bytes.find("errno "), std::string::npos) << file;
        return result.stdout_bytes;
    };
    EXPECT_EQ(cat("/etc/hostname"), "imaged\n");  // control: the probe reads the guest's files
    for (const auto& [file, format] : kGuestViews) {
        const auto text = cat(file);
        EXPECT_EQ(leaks(text, host, format), std::vector<std::string>{})
            << file << " shows the host:" << joined(leaks(text, host, format)) << "\n"
            << text;
    }
    EXPECT_FALSE(parse_mountinfo(cat("/proc/self/mountinfo")).empty());
    EXPECT_EQ(cat("/proc/1/cmdline"), std::string("maf-sandbox-supervisor") + '\0');
    EXPECT_EQ(cat("/proc/cmdline"), "");
    try {
        run_blocking(backend.dispose_scope(key.scope, key.thread_id));
    } catch (...) {
    }
}

}  // namespace
}  // namespace maf_sandbox::security
