// A small ACAS data plane for backend tests, served over loopback HTTPS: sandboxes are records,
// exec runs the command under this host's /bin/sh, and the file plane is this host's filesystem
// (guest paths are host paths, as in the core tests' HostShellSandbox). It has no isolation at
// all; it exists so the backend's real HTTP, capture scripts and path walks run end to end until
// the acas-emulator is available. `fault` lets a test answer any request itself; `rewrite` lets it
// stand in for an image whose commands behave differently (a wrapper `rm`, a missing tool).
//
// One guest name is not a host path: the removal probe's directories at the guest's root
// (/.maf-authority-*) live in this fake's private directory, so a test never writes into the
// test host's real `/`.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "loopback.hpp"

extern char** environ;

namespace maf_sandbox::testing {

namespace json = boost::json;

struct ShellOutcome {
    std::string out, err;
    int code = 0;
};

// Runs `command` under /bin/sh in its own process group. A command still running after `limit`
// is killed with its group: the fake answers one request at a time, and a client that gave up on
// a `sleep 30` (the EXEC timeout probe) should not hold every later request behind it.
inline ShellOutcome run_host_shell(const std::string& command, const std::string& cwd,
                                   std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    int out[2], err[2];
    if (::pipe(out) != 0 || ::pipe(err) != 0)
        return {"", "pipe failed", 1};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addclose(&actions, err[0]);
    const std::string script = "cd " + std::string("'") + cwd + "' && " + command;
    const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    pid_t pid = -1;
    ::posix_spawn(&pid, "/bin/sh", &actions, &attributes, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    const auto kill_at = std::chrono::steady_clock::now() + limit;
    bool killed = false;
    ::close(out[1]);
    ::close(err[1]);
    ShellOutcome outcome;
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int open_fds = 2;
    char buffer[65536];
    while (open_fds > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            kill_at - std::chrono::steady_clock::now());
        if (!killed && left.count() <= 0) {
            ::kill(-pid, SIGKILL);
            killed = true;
        }
        if (killed && left < -std::chrono::seconds(2))
            break;  // something outside the group holds the pipes: answer with what we have
        ::poll(fds, 2, killed ? 100 : static_cast<int>(std::max<long>(left.count(), 1)));
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP))) {
                const auto n = ::read(fds[i].fd, buffer, sizeof buffer);
                if (n <= 0) {
                    ::close(fds[i].fd);
                    fds[i].fd = -1;
                    --open_fds;
                } else {
                    (i == 0 ? outcome.out : outcome.err)
                        .append(buffer, static_cast<std::size_t>(n));
                }
            }
        }
    }
    for (auto& fd : fds) {
        if (fd.fd >= 0)
            ::close(fd.fd);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    outcome.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return outcome;
}

inline std::string percent_decode(std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '%' && i + 2 < text.size()) {
            out.push_back(
                static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16)));
            i += 2;
        } else {
            out.push_back(text[i] == '+' ? ' ' : text[i]);
        }
    }
    return out;
}

class FakeAcasService {
  public:
    using Fault = std::function<std::optional<net::HttpResponse>(const net::HttpRequest&,
                                                                 const std::string& path)>;
    // Applied to every exec command before the host shell runs it.
    using Rewrite = std::function<std::string(std::string command)>;
    static constexpr const char* kProbePrefix = "/.maf-authority-";
    static constexpr const char* kNoticePrefix = "/tmp/.maf-sandbox-replaced-";

    explicit FakeAcasService(std::optional<std::string> emulator_header = std::nullopt)
        : emulator_header_(std::move(emulator_header)),
          server_(
              [this](net::HttpRequest request) -> Task<net::HttpResponse> {
                  co_return handle(request);
              },
              true) {
        ca_file_ = dir_.write("ca.pem", server_.ca_pem());
        probe_root_ = (dir_.path() / "guest-root").string();
        std::filesystem::create_directories(probe_root_);
        notice_root_ = (dir_.path() / "notice-root").string();
        std::filesystem::create_directories(notice_root_ + "/tmp");
    }

    // A real service's disposal takes the guest's /tmp with it; here the guest is this host, so
    // the scratch directories its execs named are removed on DELETE and at the end.
    ~FakeAcasService() {
        std::lock_guard lock(mutex_);
        for (const auto& [id, tokens] : scratch_)
            remove_scratch(tokens);
    }

    std::string endpoint() const { return server_.origin(); }
    // Every HTTP Authorization header value the service received, in order.
    std::vector<std::string> authorizations() {
        std::lock_guard lock(mutex_);
        return authorizations_;
    }
    const std::string& ca_file() const { return ca_file_; }

    void set_fault(Fault fault) {
        std::lock_guard lock(mutex_);
        fault_ = std::move(fault);
    }
    void set_rewrite(Rewrite rewrite) {
        std::lock_guard lock(mutex_);
        rewrite_ = std::move(rewrite);
    }
    // Every exec command received, as the client sent it, in order.
    std::vector<std::string> exec_commands() {
        std::lock_guard lock(mutex_);
        return exec_commands_;
    }
    // Every path the file plane was asked to create with mkdir, in order.
    std::vector<std::string> mkdirs() {
        std::lock_guard lock(mutex_);
        return mkdirs_;
    }
    // The host directory holding the guest root's probe directories (see the header comment).
    const std::string& probe_root() const { return probe_root_; }
    // The probe directories left behind (none once every probe cleaned up).
    std::vector<std::string> probe_leftovers() const {
        std::vector<std::string> names;
        for (const auto& child : std::filesystem::directory_iterator(probe_root_))
            names.push_back(child.path().filename().string());
        return names;
    }
    std::size_t count(const std::string& method, const std::string& path_suffix) {
        std::lock_guard lock(mutex_);
        std::size_t n = 0;
        for (const auto& [m, p] : log_)
            n += (m == method && p.size() >= path_suffix.size() &&
                  p.compare(p.size() - path_suffix.size(), path_suffix.size(), path_suffix) == 0);
        return n;
    }
    std::size_t requests() {
        std::lock_guard lock(mutex_);
        return log_.size();
    }
    std::vector<std::pair<std::string, std::string>> log() {
        std::lock_guard lock(mutex_);
        return log_;
    }
    std::size_t live_sandboxes() {
        std::lock_guard lock(mutex_);
        return sandboxes_.size();
    }
    std::optional<json::object> sandbox(const std::string& id) {
        std::lock_guard lock(mutex_);
        auto found = sandboxes_.find(id);
        if (found == sandboxes_.end())
            return std::nullopt;
        return found->second;
    }

  private:
    static net::HttpResponse reply(int status, json::value body = json::object{}) {
        net::HttpResponse response;
        response.status = status;
        response.headers.set("Content-Type",
                             status >= 400 ? "application/problem+json" : "application/json");
        response.body = json::serialize(body);
        return response;
    }
    static net::HttpResponse problem(int status, const std::string& title) {
        return reply(status, json::object{{"title", title}, {"status", status}, {"detail", title}});
    }

    // The probe directories' guest name mapped into probe_root_, the replacement notice's marker
    // (named by sandbox id, which this fake reuses across tests) into notice_root_; every other
    // path as it is.
    std::string host_path(const std::string& guest) const {
        if (guest.rfind(kProbePrefix, 0) == 0)
            return probe_root_ + guest;
        if (guest.rfind(kNoticePrefix, 0) == 0)
            return notice_root_ + guest;
        return guest;
    }
    std::string host_command(std::string command) const {
        const std::string prefix = kProbePrefix;
        std::size_t at = 0;
        while ((at = command.find(prefix, at)) != std::string::npos) {
            // Only a word that starts with the name is the probe's path (quoted or bare).
            if (at == 0 || command[at - 1] == '\'' || command[at - 1] == ' ') {
                command.insert(at, probe_root_);
                at += probe_root_.size();
            }
            at += prefix.size();
        }
        return command;
    }

    static json::object entry(const std::string& path, const std::string& shown) {
        struct stat st {};
        ::lstat(path.c_str(), &st);
        json::object e{{"name", std::filesystem::path(shown).filename().string()},
                       {"path", shown},
                       {"size", static_cast<std::int64_t>(st.st_size)},
                       {"mode", static_cast<std::int64_t>(st.st_mode & 07777)},
                       {"isDir", S_ISDIR(st.st_mode)},
                       {"isSymlink", S_ISLNK(st.st_mode)},
                       {"modifiedTime", static_cast<std::int64_t>(st.st_mtime)}};
        if (S_ISLNK(st.st_mode))
            e["symlinkTarget"] = std::filesystem::read_symlink(path).string();
        return e;
    }

    net::HttpResponse handle(const net::HttpRequest& request) {
        const auto q = request.target.find('?');
        const std::string path = request.target.substr(0, q);
        std::map<std::string, std::string> query;
        if (q != std::string::npos) {
            std::stringstream pairs(request.target.substr(q + 1));
            std::string pair;
            while (std::getline(pairs, pair, '&')) {
                const auto eq = pair.find('=');
                query[pair.substr(0, eq)] =
                    percent_decode(eq == std::string::npos ? "" : pair.substr(eq + 1));
            }
        }
        Fault fault;
        {
            std::lock_guard lock(mutex_);
            log_.emplace_back(request.method, path);
            // Recorded before any fault answers it, so a test sees every command sent.
            if (request.method == "POST" && path.ends_with("/executeShellCommand")) {
                try {
                    exec_commands_.emplace_back(
                        json::parse(request.body).at("command").as_string());
                } catch (const std::exception&) {
                    exec_commands_.emplace_back();
                }
            }
            authorizations_.push_back(request.headers.get("Authorization").value_or(""));
            fault = fault_;
        }
        if (fault) {
            if (auto answer = fault(request, path))
                return decorate(std::move(*answer));
        }
        return decorate(route(request, path, query));
    }

    net::HttpResponse decorate(net::HttpResponse response) {
        if (emulator_header_)
            response.headers.set("x-acas-emulator", *emulator_header_);
        return response;
    }

    net::HttpResponse route(const net::HttpRequest& request, const std::string& path,
                            std::map<std::string, std::string>& query) {
        if (request.headers.get("Authorization").value_or("").rfind("Bearer ", 0) != 0)
            return problem(401, "Unauthorized");
        const std::string group = "/subscriptions/sub/resourceGroups/rg/sandboxGroups/grp";
        if (path.rfind(group, 0) != 0 || query["api-version"] != "2026-02-01-preview")
            return problem(400, "BadRequest");
        const auto rest = path.substr(group.size());
        std::lock_guard lock(mutex_);
        if (rest == "/diskimages/public") {
            return reply(200,
                         json::object{{"value", json::array{json::object{{"name", "ubuntu"}},
                                                            json::object{{"name", "python-3.13"}},
                                                            json::object{{"name", "host"}}}}});
        }
        if (rest == "/diskimages") {
            return reply(200, json::array{json::object{
                                  {"id", "img-1"},
                                  {"image", json::object{{"base", "reg.example.io/tool:1.0"}}}}});
        }
        if (rest == "/sandboxes" && request.method == "PUT") {
            auto body = json::parse(request.body).as_object();
            if (body.contains("labels")) {
                for (const auto& [k, v] : body["labels"].as_object()) {
                    if (v.as_string().size() > 63)
                        return problem(400, "Label value too long");
                }
            }
            const std::string id = "sb-" + std::to_string(++next_id_);
            json::object sandbox{{"id", id},
                                 {"state", "Creating"},
                                 {"labels", body["labels"]},
                                 {"egressPolicy", body["egressPolicy"]},
                                 {"lifecycle", body["lifecycle"]}};
            sandboxes_[id] = sandbox;
            return reply(201, sandbox);
        }
        if (rest == "/sandboxes" && request.method == "GET") {
            json::array items;
            std::map<std::string, std::string> wanted;
            std::stringstream pairs(query["labels"]);
            std::string pair;
            while (std::getline(pairs, pair, ',')) {
                if (!pair.empty())
                    wanted[pair.substr(0, pair.find('='))] = pair.substr(pair.find('=') + 1);
            }
            for (const auto& [id, sandbox] : sandboxes_) {
                bool match = true;
                for (const auto& [k, v] : wanted) {
                    const auto& labels = sandbox.at("labels");
                    match = match && labels.is_object() && labels.as_object().contains(k) &&
                            labels.as_object().at(k).as_string() == v;
                }
                if (match)
                    items.push_back(sandbox);
            }
            return reply(200, json::object{{"value", items}});
        }
        const std::string prefix = "/sandboxes/";
        if (rest.rfind(prefix, 0) != 0)
            return problem(404, "NotFound");
        const auto tail = rest.substr(prefix.size());
        const auto slash = tail.find('/');
        const auto id = tail.substr(0, slash);
        const auto sub = slash == std::string::npos ? std::string() : tail.substr(slash);
        auto found = sandboxes_.find(id);
        if (found == sandboxes_.end())
            return problem(404, "SandboxNotFound");
        auto& sandbox = found->second;
        if (sub.empty() && request.method == "GET") {
            json::object answer = sandbox;
            sandbox["state"] = "Running";  // Creating is visible once, then Running
            return reply(200, answer);
        }
        if (sub.empty() && request.method == "DELETE") {
            sandboxes_.erase(found);
            remove_scratch(scratch_[id]);
            scratch_.erase(id);
            return reply(200);
        }
        if (sub == "/lifecycle") {
            sandbox["lifecyclePolicy"] = json::parse(request.body);
            return reply(200, sandbox["lifecyclePolicy"]);
        }
        if (sub == "/resume")
            return reply(200, sandbox);
        if (sub == "/executeShellCommand") {
            const auto body = json::parse(request.body).as_object();
            const std::string cwd = body.contains("workingDirectory")
                                        ? std::string(body.at("workingDirectory").as_string())
                                        : "/";
            std::string command(body.at("command").as_string());
            if (rewrite_)
                command = rewrite_(std::move(command));
            command = host_command(std::move(command));
            const std::string marker = "maf-exec-";
            for (auto at = command.find(marker); at != std::string::npos;
                 at = command.find(marker, at + 1)) {
                const auto token = command.substr(at, marker.size() + 32);
                if (token.size() == marker.size() + 32 &&
                    token.find_first_not_of("0123456789abcdef", marker.size()) ==
                        std::string::npos) {
                    scratch_[id].insert(token);
                }
            }
            const auto outcome = run_host_shell(command, cwd);
            return reply(200, json::object{{"stdout", outcome.out},
                                           {"stderr", outcome.err},
                                           {"exitCode", outcome.code}});
        }
        const std::string guest_file = query["path"];
        const std::string file = host_path(guest_file);
        if (sub == "/files/stat") {
            struct stat st {};
            if (::lstat(file.c_str(), &st) != 0)
                return problem(404, "FileNotFound");
            return reply(200, entry(file, guest_file));
        }
        if (sub == "/files/list") {
            std::error_code error;
            if (!std::filesystem::is_directory(file, error))
                return problem(404, "DirectoryNotFound");
            json::array entries;
            for (const auto& child : std::filesystem::directory_iterator(file)) {
                const auto name = child.path().filename().string();
                entries.push_back(entry(file + "/" + name, guest_file + "/" + name));
            }
            return reply(200, json::object{{"path", guest_file}, {"entries", entries}});
        }
        if (sub == "/files" && request.method == "GET") {
            std::ifstream in(file, std::ios::binary);
            if (!in)
                return problem(404, "FileNotFound");
            std::ostringstream bytes;
            bytes << in.rdbuf();
            net::HttpResponse response;
            response.headers.set("Content-Type", "application/octet-stream");
            response.body = bytes.str();
            return response;
        }
        if (sub == "/files" && request.method == "PUT") {
            std::filesystem::create_directories(std::filesystem::path(file).parent_path());
            std::ofstream(file, std::ios::binary) << request.body;
            return reply(200);
        }
        if (sub == "/files" && request.method == "DELETE") {
            std::error_code error;
            if (!std::filesystem::exists(std::filesystem::symlink_status(file)))
                return problem(404, "FileNotFound");
            std::filesystem::remove_all(file, error);
            return reply(200);
        }
        if (sub == "/files/mkdir") {
            const std::string guest(json::parse(request.body).at("path").as_string());
            mkdirs_.push_back(guest);
            std::error_code error;
            std::filesystem::create_directories(host_path(guest), error);
            if (error)
                return problem(409, "PathConflict");
            return reply(200);
        }
        return problem(404, "NotFound");
    }

    static void remove_scratch(const std::set<std::string>& tokens) {
        std::error_code ignored;
        for (const auto& token : tokens) {
            std::filesystem::remove_all("/tmp/" + token, ignored);
            std::filesystem::remove("/tmp/" + token + ".stdin", ignored);
        }
    }

    std::optional<std::string> emulator_header_;
    TempDir dir_;
    std::string ca_file_;
    std::mutex mutex_;
    Fault fault_;
    Rewrite rewrite_;
    std::vector<std::string> exec_commands_;
    std::vector<std::string> mkdirs_;
    std::string probe_root_;
    std::string notice_root_;
    std::vector<std::pair<std::string, std::string>> log_;
    std::map<std::string, json::object> sandboxes_;
    std::map<std::string, std::set<std::string>> scratch_;  // sandbox id -> exec tokens
    std::vector<std::string> authorizations_;
    int next_id_ = 0;
    LoopbackServer server_;
};

}  // namespace maf_sandbox::testing
