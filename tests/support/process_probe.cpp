#include "process_probe.hpp"

#include <fmt/format.h>
#include <fstream>
#include <sstream>

namespace maf_sandbox::testing {

std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

int processes_with_argv(const std::vector<std::string>& argv) {
    std::string expected;
    for (const auto& arg : argv) {
        expected += arg;
        expected += '\0';
    }
    int count = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
        count += read_text(entry.path() / "cmdline") == expected ? 1 : 0;
    }
    return count;
}

std::string status_field(pid_t pid, const std::string& name) {
    std::istringstream status(read_text(fmt::format("/proc/{}/status", pid)));
    for (std::string line; std::getline(status, line);) {
        if (line.starts_with(name + ":")) {
            auto value = line.substr(name.size() + 1);
            value.erase(0, value.find_first_not_of(" \t"));
            return value;
        }
    }
    return {};
}

std::vector<unsigned> status_ids(pid_t pid, const std::string& name) {
    std::istringstream text(status_field(pid, name));
    std::vector<unsigned> ids;
    for (unsigned id; text >> id;) {
        ids.push_back(id);
    }
    return ids;
}

std::string comm_of(pid_t pid) {
    auto text = read_text(fmt::format("/proc/{}/comm", pid));
    if (!text.empty() && text.back() == '\n') {
        text.pop_back();
    }
    return text;
}

std::vector<pid_t> cgroup_processes(const std::filesystem::path& cgroup) {
    std::istringstream procs(read_text(cgroup / "cgroup.procs"));
    std::vector<pid_t> pids;
    for (pid_t pid; procs >> pid;) {
        pids.push_back(pid);
    }
    return pids;
}

std::optional<pid_t> find_process(const std::filesystem::path& cgroup, const std::string& comm) {
    for (const pid_t pid : cgroup_processes(cgroup)) {
        if (comm_of(pid) == comm) {
            return pid;
        }
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::testing
