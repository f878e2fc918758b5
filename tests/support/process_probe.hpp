// What a test reads of a running process from /proc and of a cgroup from its directory, to prove
// who a service runs as (ids, capabilities, filter) and which processes a sandbox holds. A file
// that cannot be read reads as empty, so a process that ended mid-test fails the test's own
// assertion rather than throwing.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace maf_sandbox::testing {

// The whole of a text file ("" when it cannot be read).
std::string read_text(const std::filesystem::path& path);

// The value of one "Name:" line of /proc/<pid>/status, leading blanks dropped ("" when absent).
std::string status_field(pid_t pid, const std::string& name);
// The numbers of a status line ("Uid", "Gid": real, effective, saved, file system).
std::vector<unsigned> status_ids(pid_t pid, const std::string& name);
// /proc/<pid>/comm without its newline.
std::string comm_of(pid_t pid);

// How many live processes have exactly `argv` as their command line, as the host sees them
// (sandboxes included). Any process on the machine may exit between the listing and the read.
int processes_with_argv(const std::vector<std::string>& argv);

// Every process in the cgroup directory `cgroup` (host pids, from cgroup.procs).
std::vector<pid_t> cgroup_processes(const std::filesystem::path& cgroup);
// The first process of the cgroup whose comm is `comm`.
std::optional<pid_t> find_process(const std::filesystem::path& cgroup, const std::string& comm);

}  // namespace maf_sandbox::testing
