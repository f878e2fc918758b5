// Files mapped and then closed keep their kernel file objects without a descriptor, so
// RLIMIT_NOFILE x the pids limit does not bound a sandbox's share of fs.file-max. No kernel
// control divides them off (a v1 kmem limit is accepted and ignored by current kernels; v2 has
// none): the sandbox's memory cgroup, to which the kernel charges each object, is their one bound.
// This proves that bound on a scaled sandbox (64 MiB, so the flood stays a few percent of the
// host's file table) and checks that file_table_exposure, which reports whether a sandbox's
// memory keeps it within its share, never counts fewer files than a sandbox really holds.
#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "maf_sandbox/runtime/kernel/file_table_exposure.hpp"
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "polling.hpp"
#include "sandbox_fixture.hpp"

namespace maf_sandbox::runtime::testing {
namespace {

using namespace std::chrono_literals;

std::uint64_t files_in_use() {
    std::uint64_t allocated = 0;
    std::ifstream("/proc/sys/fs/file-nr") >> allocated;
    return allocated;
}

// Four guest processes each map a page of one file and close its descriptor, up to 60,000 times
// (under vm.max_map_count), until memory runs out; each prints how many it held.
constexpr const char* kMapFlood = R"(python3 - <<'PY'
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
open("/tmp/mapped", "wb").write(b"x" * 4096)
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        held = 0
        while held < 60000:
            try:
                fd = os.open("/tmp/mapped", os.O_RDONLY)
            except OSError:
                break
            address = libc.mmap(None, 4096, 1, 1, fd, 0)
            os.close(fd)
            if address in (None, ctypes.c_void_p(-1).value):
                break
            held += 1
        print(held, flush=True)
        time.sleep(1)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
PY
)";

TEST(FileTableMmap, MappedFilesPastTheDescriptorLimitAreBoundedByTheSandboxsMemory) {
    constexpr std::uint64_t kMemory = 64ull << 20;
    StateDir state;
    auto launch = host_launch(state.path(), unique_id());
    launch.limits.memory_bytes = kMemory;
    ScopedSandbox box(launch);
    // Benign: a guest maps a file and reads it through the mapping.
    EXPECT_EQ(box.sh("printf mapped > /tmp/m && python3 -c \"import mmap; "
                     "f = open('/tmp/m', 'rb'); print(mmap.mmap(f.fileno(), 0, "
                     "prot=mmap.PROT_READ)[:].decode())\"")
                  .stdout_head,
              "mapped\n");
    const auto nofile = std::stoull(box.sh("ulimit -n").stdout_head);

    const auto before = files_in_use();
    std::atomic<bool> done{false};
    std::atomic<std::uint64_t> peak{before};
    std::thread sampler([&] {
        while (!done) {
            peak = std::max<std::uint64_t>(peak, files_in_use());
            std::this_thread::sleep_for(5ms);
        }
    });
    struct Join {
        std::atomic<bool>& done;
        std::thread& thread;
        ~Join() {
            done = true;
            if (thread.joinable()) {
                thread.join();
            }
        }
    } join{done, sampler};
    box.sh(kMapFlood,
           std::chrono::seconds(120));  // its processes may be OOM-killed: that is the bound
    done = true;
    sampler.join();
    const std::uint64_t grew = peak - before;

    const auto exposure =
        file_table_exposure(HostBudgets{}, kMemory, read_kernel_number("/proc/sys/fs/file-max"));
    std::printf(
        "[ files ] a %llu MiB sandbox held %llu mapped files (descriptor limit %llu a "
        "process; exposure ceiling %llu, share %llu)\n",
        static_cast<unsigned long long>(kMemory >> 20), static_cast<unsigned long long>(grew),
        static_cast<unsigned long long>(nofile),
        static_cast<unsigned long long>(exposure.held_by_memory),
        static_cast<unsigned long long>(exposure.share_files));
    // The class is real: four processes held far more files than four descriptor limits.
    EXPECT_GT(grew, 4 * nofile * 4) << "the flood never got past RLIMIT_NOFILE";
    // And memory bounds it: never past what the exposure counts for this memory limit. The
    // host's other activity moves file-nr too: a margin of 20,000 files.
    EXPECT_LE(grew, exposure.held_by_memory + 20000);
    // The sandbox survives its own flood, and its files are given back.
    EXPECT_EQ(box.sh("echo ok").stdout_head, "ok\n");
    EXPECT_TRUE(maf_sandbox::testing::poll_until([&] { return files_in_use() < before + 20000; },
                                                 30s, 50ms));
}

}  // namespace
}  // namespace maf_sandbox::runtime::testing
