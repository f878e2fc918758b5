// Escapes through the kernel's surface: the guest probe makes each call with raw syscalls and
// reports its errno. The seccomp filter answers EPERM (never a kill, so a program can say what it
// was refused); what the filter allows, missing capabilities and the namespaces refuse.
#include <gtest/gtest.h>
#include <linux/aio_abi.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "security_fixture.hpp"

namespace maf_sandbox::security {
namespace {

class SyscallEscape : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { box_ = new Box(); }
    static void TearDownTestSuite() { delete box_; }
    static int errno_of(const std::vector<std::string>& args) { return box_->errno_of(args); }
    static std::string hex(unsigned long value) { return fmt::format("{:x}", value); }
    static Box* box_;
};
Box* SyscallEscape::box_ = nullptr;

TEST_F(SyscallEscape, MountOfATmpfsOrABindOfTheRootIsRefused) {
    EXPECT_EQ(errno_of({"mount"}), EPERM);
    EXPECT_EQ(errno_of({"bind-mount"}), EPERM);
}

TEST_F(SyscallEscape, UnmountingProcOrTheRootIsRefused) {
    EXPECT_EQ(errno_of({"umount", "/proc"}), EPERM);
    EXPECT_EQ(errno_of({"umount", "/"}), EPERM);
}

TEST_F(SyscallEscape, NewMountApiCallsAreRefused) {
    EXPECT_EQ(errno_of({"open_tree"}), EPERM);
    EXPECT_EQ(errno_of({"fsopen"}), EPERM);
}

TEST_F(SyscallEscape, ChrootAndPivotRootAreRefused) {
    EXPECT_EQ(errno_of({"chroot", "/tmp"}), EPERM);
    EXPECT_EQ(errno_of({"pivot_root"}), EPERM);
}

TEST_F(SyscallEscape, UnshareOfEveryNamespaceIsRefused) {
    for (const unsigned long flag : {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID,
                                     CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP}) {
        EXPECT_EQ(errno_of({"unshare", hex(flag)}), EPERM) << "flag " << hex(flag);
    }
}

TEST_F(SyscallEscape, CloneWithNamespaceFlagsIsRefusedAndClone3FallsBackToClone) {
    EXPECT_EQ(errno_of({"clone", hex(CLONE_NEWUSER)}), EPERM);
    EXPECT_EQ(errno_of({"clone", hex(CLONE_NEWNET | CLONE_NEWNS)}), EPERM);
    EXPECT_EQ(errno_of({"clone", "0"}), 0);  // a plain fork still works
    // clone3 hides its flags in memory a filter cannot read: ENOSYS sends libc back to clone.
    EXPECT_EQ(errno_of({"clone3"}), ENOSYS);
}

TEST_F(SyscallEscape, SetnsIntoAnyNamespaceIsRefused) {
    for (const char* ns :
         {"/proc/self/ns/mnt", "/proc/self/ns/user", "/proc/self/ns/net", "/proc/1/ns/mnt"}) {
        const int error = errno_of({"setns", ns});
        EXPECT_TRUE(error == EPERM || error == EACCES) << ns << ": errno " << error;
    }
}

TEST_F(SyscallEscape, PtraceOfItselfOrThePidOneIsRefused) {
    EXPECT_EQ(errno_of({"ptrace-traceme"}), EPERM);
    EXPECT_EQ(errno_of({"ptrace-attach", "1"}), EPERM);
    EXPECT_EQ(errno_of({"process_vm_readv", "1"}), EPERM);
}

TEST_F(SyscallEscape, BpfIsRefused) {
    EXPECT_EQ(errno_of({"bpf"}), EPERM);
}

TEST_F(SyscallEscape, KeyringCallsAreRefused) {
    EXPECT_EQ(errno_of({"keyctl"}), EPERM);
    EXPECT_EQ(errno_of({"add_key"}), EPERM);
}

TEST_F(SyscallEscape, IoUringSetupIsRefused) {
    EXPECT_EQ(errno_of({"io_uring"}), EPERM);
}

// Native AIO contexts are a host-wide pool (fs.aio-max-nr): the guest is refused the whole family
// with ENOSYS (libaio users fall back to plain I/O), and the host's own io_setup is untouched.
TEST_F(SyscallEscape, NativeAioIsRefusedToTheGuestWhileTheHostKeepsIt) {
    const auto host_setup = [] {
        aio_context_t ctx = 0;
        const long rc = ::syscall(SYS_io_setup, 128, &ctx);
        const int err = rc == 0 ? 0 : errno;
        if (rc == 0) {
            ::syscall(SYS_io_destroy, ctx);
        }
        return err;
    };
    ASSERT_EQ(host_setup(), 0) << "control: the host can make an AIO context";
    const auto out = box_->probe({"io_setup"});
    EXPECT_EQ(out, fmt::format("errno {0}\nerrno {0}\nerrno {0}\nerrno {0}\n", ENOSYS)) << out;
    EXPECT_EQ(host_setup(), 0) << "the host's io_setup still works after the guest's attempt";
    EXPECT_EQ(errno_of({"clone", "0"}), 0) << "benign control: the guest's plain calls still work";
}

// Huge pages are one host-wide pool the memory cgroup does not charge: each way to map them is
// refused with EINVAL (what a host without huge pages answers), while plain mappings still work.
TEST_F(SyscallEscape, HugePageMappingsAreRefusedWhilePlainMappingsWork) {
    const auto out = box_->probe({"hugetlb"});
    EXPECT_EQ(out, fmt::format("errno {0}\nerrno {0}\nerrno {0}\nerrno 0\n", EINVAL)) << out;
}

TEST_F(SyscallEscape, PerfEventOpenIsRefused) {
    EXPECT_EQ(errno_of({"perf_event_open"}), EPERM);
}

TEST_F(SyscallEscape, UserfaultfdIsRefused) {
    EXPECT_EQ(errno_of({"userfaultfd"}), EPERM);
}

TEST_F(SyscallEscape, FileHandleCallsThatCouldOpenHostInodesAreRefused) {
    EXPECT_EQ(errno_of({"open_by_handle_at"}), EPERM);
    EXPECT_EQ(errno_of({"name_to_handle_at"}), EPERM);
}

TEST_F(SyscallEscape, ModulesKexecRebootSwapSyslogClockAndAcctAreRefused) {
    const auto out = box_->probe({"kernel"});
    std::string expected;
    for (int i = 0; i < 8; ++i) {
        expected += fmt::format("errno {}\n", EPERM);
    }
    EXPECT_EQ(out, expected) << out;
}

TEST_F(SyscallEscape, TiocstiCannotInjectInputEvenWithHighBitsInTheRequest) {
    EXPECT_EQ(errno_of({"tiocsti", "0", hex(TIOCSTI)}), EPERM);
    EXPECT_EQ(errno_of({"tiocsti", "1", hex(TIOCSTI)}), EPERM);
    EXPECT_EQ(errno_of({"tiocsti", "0", hex(0x100000000ul | TIOCSTI)}), EPERM);
    EXPECT_EQ(errno_of({"tiocsti", "0", hex(TIOCLINUX)}), EPERM);
    // And there is no terminal to inject into: the guest has no controlling tty.
    EXPECT_EQ(errno_of({"open", "/dev/tty", "2"}), ENXIO);
}

TEST_F(SyscallEscape, ForeignAbiCallsNeverReachTheKernel) {
    // int 0x80 (i386): refused by the filter's bad-arch action, or a fault without IA32 support.
    const auto out = box_->probe({"i386"});
    EXPECT_TRUE(out == fmt::format("result {}\n", -EPERM) || out.starts_with("signal"))
        << "an i386 getpid was served: " << out;
    // The x32 bit on a native call: never a successful unshare.
    EXPECT_NE(errno_of({"x32"}), 0);
}

TEST_F(SyscallEscape, DeviceNodesCannotBeCreatedAnywhere) {
    EXPECT_EQ(errno_of({"mknod", "/tmp/mem", "c"}), EPERM);
    EXPECT_EQ(errno_of({"mknod", "/maf-sandbox/work/disk", "b"}), EPERM);
    EXPECT_EQ(errno_of({"mknod", "/dev/mem", "c"}), EROFS);  // and /dev is read-only first
    EXPECT_EQ(errno_of({"mknod", "/tmp/fifo", "p"}), 0);     // a FIFO is not a device
}

TEST_F(SyscallEscape, HostDevicesAreAbsentAndTheDevDirectoryIsReadOnly) {
    const auto listing = box_->sh("ls /dev");
    // /dev/ptmx is no host device: it links to the sandbox's own devpts instance (checked below).
    for (const char* absent : {"mem", "kmem", "port", "sda", "vda", "kmsg", "fuse"}) {
        EXPECT_EQ((" " + listing.stdout_bytes).find(std::string("\n") + absent + "\n"),
                  std::string::npos)
            << "/dev/" << absent << " is in the guest";
    }
    EXPECT_EQ(box_->sh("readlink /dev/ptmx").stdout_bytes, "pts/ptmx\n");
    EXPECT_EQ(errno_of({"open", "/dev/planted", "41"}), EROFS);
}

TEST_F(SyscallEscape, TheGuestHasNoCapabilitiesAndNoNewPrivileges) {
    const auto status = box_->sh(
        "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' "
        "/proc/self/status | awk '{print $2}' | tr '\\n' ' '");
    EXPECT_EQ(status.stdout_bytes,
              "0000000000000000 0000000000000000 0000000000000000 0000000000000000 "
              "0000000000000000 1 2 ");
}

TEST_F(SyscallEscape, ASetuidRootBinaryInTheGuestGivesNoPrivilege) {
    // What an image could ship: the probe owned by the guest's root with the setuid bit.
    const auto handle = box_->handle();
    const uid_t root_uid = handle.ids.to_host(0);
    runtime::GuestFs root_owned(runtime::open_sandbox_root(handle),
                                runtime::GuestOwner{root_uid, root_uid});
    root_owned.write("/maf-sandbox/work/suid-probe", slurp(MAF_SECURITY_PROBE), {04755, false});
    const auto mode = box_->sh("stat -c '%a %u' /maf-sandbox/work/suid-probe");
    ASSERT_EQ(mode.stdout_bytes, "4755 0\n");
    const auto ids = box_->exec(Argv{"/maf-sandbox/work/suid-probe", "ids"});
    EXPECT_EQ(ids.stdout_bytes,
              fmt::format("uid 1000 euid 1000 gid 1000 egid 1000 nnp 1 setuid0 {}\n", EPERM))
        << ids.stderr_bytes;
}

TEST_F(SyscallEscape, ProcOfThePidOneIsClosedToTheGuest) {
    // PID 1 is the supervisor: its root, cwd and descriptors (cgroup directories) stay closed.
    EXPECT_EQ(errno_of({"read", "/proc/1/root/etc/hostname"}), EACCES);
    EXPECT_EQ(errno_of({"open", "/proc/1/cwd", "0"}), EACCES);
    EXPECT_EQ(errno_of({"open", "/proc/1/fd/0", "0"}), EACCES);
    EXPECT_EQ(errno_of({"read", "/proc/1/environ"}), EACCES);
    EXPECT_EQ(errno_of({"read", "/proc/1/mem"}), EACCES);
}

TEST_F(SyscallEscape, ProcSelfRootWalksStayInsideTheSandbox) {
    const auto secret = Outside{};
    EXPECT_EQ(errno_of({"read", "/proc/self/root" + secret.secret.string()}), ENOENT);
    EXPECT_EQ(errno_of({"read", "/proc/self/root/../../../.." + secret.secret.string()}), ENOENT);
    EXPECT_EQ(box_->sh("ls /proc/self/root/ | tr '\\n' ' '").stdout_bytes,
              box_->sh("ls / | tr '\\n' ' '").stdout_bytes);
}

TEST(SyscallEscapeRootInside, RootInsideStillCannotReachPidOneOrMountOrLoadAnything) {
    local::LocalBackendConfig config;
    config.root_inside = true;
    Box box(config);
    EXPECT_EQ(box.probe({"ids"}), fmt::format("uid 0 euid 0 gid 0 egid 0 nnp 1 setuid0 0\n"));
    // Same uid as PID 1, but PID 1 is not dumpable and the guest has no CAP_SYS_PTRACE.
    EXPECT_EQ(box.errno_of({"read", "/proc/1/root/etc/hostname"}), EACCES);
    EXPECT_EQ(box.errno_of({"open", "/proc/1/fd/0", "0"}), EACCES);
    EXPECT_EQ(box.errno_of({"mount"}), EPERM);
    EXPECT_EQ(box.errno_of({"unshare", fmt::format("{:x}", CLONE_NEWUSER)}), EPERM);
    EXPECT_EQ(box.errno_of({"mknod", "/tmp/mem", "c"}), EPERM);
    EXPECT_EQ(box.errno_of({"open", "/usr/bin/planted", "41"}), EROFS);
    EXPECT_EQ(box.errno_of({"kill", "1", "9"}), 0);  // delivered, but PID 1 ignores it
    EXPECT_EQ(box.sh("echo alive").stdout_bytes, "alive\n");
}

}  // namespace
}  // namespace maf_sandbox::security
