// Test specimens for the conformance suite's own tests: a simulated POSIX guest whose links have
// real targets (so a sandbox that skips the ancestor walk genuinely leaks), with switches that
// make it misbehave one way at a time, and a sandbox that answers only curl for the EGRESS suite.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::testing {

enum class TimeoutMode { bounded, instant, late, returns };

// Every switch off is a conforming guest.
struct GuestBehaviour {
    bool walks = true;        // the ancestor walk on every path method
    bool names_links = true;  // false: links are described as `other`
    bool quoting = true;      // false: argv joined unquoted (the hostile word splits)
    bool exit_codes = true;   // false: any non-zero exit reads as 1
    TimeoutMode timeout = TimeoutMode::bounded;
    bool write_drops = false;
    bool write_translates = false;  // LF -> CRLF
    bool write_appends = false;
    bool remove_inert = false;
    bool remove_destructive_refusal = false;  // deletes, then raises the refusal
    bool remove_overbroad = false;            // recursive clears the whole working directory
    bool remove_raises_on_missing = false;
    bool remove_empty_directory_implicitly = false;
    bool remove_follows_links = false;            // unlinking also deletes the target
    bool recursive_remove_follows_links = false;  // only the recursive branch follows
    bool recursive_follows_interior_links = false;
    bool stat_raises = false;  // stat_file throws std::runtime_error
};

struct Node {
    EntryKind kind = EntryKind::file;
    std::string bytes;
    std::string target;  // links only
};

class SimulatedGuest : public Sandbox {
  public:
    explicit SimulatedGuest(GuestBehaviour behaviour = {}, std::string base = kDefaultWorkDir)
        : behaviour_(behaviour), base_(normpath(base)) {}

    std::map<std::string, Node> nodes;  // absolute real path -> node; "/" is implied

    std::string base_directory() const override { return base_; }

    Task<ExecResult> exec(ExecRequest request) override {
        const auto wd = resolve_working_directory(request.working_directory, base_);
        if (const auto* line = std::get_if<std::string>(&request.command)) {
            if (line->starts_with("exit ")) {
                co_return ExecResult{"", "", exit_code(std::stoi(line->substr(5)))};
            }
            co_return ExecResult{"", "unknown command", 127};
        }
        const auto& argv = std::get<Argv>(request.command);
        if (argv.empty()) {
            co_return ExecResult{"", "empty argv", 127};
        }
        const auto& program = argv[0];
        auto at = [&](std::size_t i) { return normpath(join_guest_path(wd, argv.at(i))); };
        if (program == "ln" && argv.size() == 4 && argv[1] == "-sfn") {
            const auto link = at(3);
            const auto parent = resolve(guest_dirname(link), true);
            if (!parent || !is_directory(*parent)) {
                co_return ExecResult{"", "ln: no such directory", 1};
            }
            nodes[join_guest_path(*parent, basename(link))] = {EntryKind::symlink, "", argv[2]};
            co_return ExecResult{};
        }
        if (program == "sleep") {
            co_return co_await sleep(Seconds{std::stod(argv.at(1))}, request.timeout);
        }
        if (program == "sh" && argv.size() >= 3 && argv[1] == "-c") {
            const auto& script = argv[2];
            if (script == "printf '%s' \"$1\"" && argv.size() >= 5) {
                co_return ExecResult{behaviour_.quoting ? argv[4] : unquoted(argv[4]), "", 0};
            }
            if (script == "test -e \"$1\" || test -L \"$1\"" && argv.size() >= 5) {
                const auto path = at(4);
                const bool there = exists(path) || test("-L", path);
                co_return ExecResult{"", "", there ? 0 : 1};
            }
            co_return ExecResult{"", "unknown script", 127};
        }
        if (program == "mkdir" && argv.size() == 3 && argv[1] == "-p") {
            co_return ExecResult{"", "", ensure_directory(at(2)) ? 0 : 1};
        }
        if (program == "test" && argv.size() == 3) {
            co_return ExecResult{"", "", test(argv[1], at(2)) ? 0 : 1};
        }
        if (program == "cat" && argv.size() == 2) {
            const auto real = resolve(at(1), true);
            if (real && nodes.count(*real) && nodes.at(*real).kind == EntryKind::file) {
                co_return ExecResult{nodes.at(*real).bytes, "", 0};
            }
            co_return ExecResult{"", "cat: no such file", 1};
        }
        if (program == "printf" && argv.size() == 2) {
            co_return ExecResult{argv[1], "", 0};
        }
        if (program == "pwd") {
            co_return ExecResult{wd + "\n", "", 0};
        }
        co_return ExecResult{"", program + ": not found", 127};
    }

    Task<ExecResult> run_code(std::string, Seconds) override {
        throw NotImplemented("the simulated guest runs no code");
        co_return ExecResult{};
    }

    Task<void> write_file(std::string path, std::string content,
                          std::string working_directory) override {
        const auto wd = resolve_working_directory(working_directory, base_);
        auto resolved = confine_guest_path(path, wd);
        if (behaviour_.walks) {
            resolved = co_await confine_guest_write_path(stat_fn(), path, wd);
        }
        if (behaviour_.write_drops) {
            co_return;
        }
        if (!ensure_directory(guest_dirname(resolved))) {
            throw NotADirectory("a parent is not a directory", ENOTDIR);
        }
        const auto real = resolve(resolved, true);
        if (behaviour_.write_translates) {
            std::string translated;
            for (char c : content) {
                translated += c == '\n' ? std::string("\r\n") : std::string(1, c);
            }
            content = translated;
        }
        auto& node = nodes[*real];
        node.kind = EntryKind::file;
        node.bytes = behaviour_.write_appends ? node.bytes + content : content;
    }

    Task<std::optional<SandboxEntry>> stat_file(std::string path,
                                                std::string working_directory) override {
        if (behaviour_.stat_raises) {
            throw std::runtime_error("the provider fell over");
        }
        const auto wd = resolve_working_directory(working_directory, base_);
        const auto resolved = confine_guest_path(path, wd);
        if (behaviour_.walks) {
            co_await refuse_symlinked_ancestors(stat_fn(), resolved, wd);
        }
        auto entry = reported(resolved);
        if (entry) {
            entry->path = *guest_path_relative_to(resolved, wd);
        }
        co_return entry;
    }

    Task<std::string> read_file(std::string path, std::string working_directory,
                                std::uint64_t max_bytes) override {
        const auto wd = resolve_working_directory(working_directory, base_);
        const auto resolved = confine_guest_path(path, wd);
        if (behaviour_.walks) {
            co_await refuse_symlinked_ancestors(stat_fn(), resolved, wd);
        }
        const auto entry = reported(resolved);
        if (!entry) {
            throw FileNotFound("no such file", ENOENT);
        }
        if (entry->kind == EntryKind::directory) {
            throw IsADirectory("is a directory", EISDIR);
        }
        if (entry->kind != EntryKind::file) {
            throw FileError("not a regular file");
        }
        const auto& bytes = nodes.at(*resolve(resolved, false)).bytes;
        if (bytes.size() > max_bytes) {
            throw SandboxTransferCapExceeded("over the cap");
        }
        co_return bytes;
    }

    Task<std::vector<SandboxEntry>> list_dir(std::string path,
                                             std::string working_directory) override {
        const auto wd = resolve_working_directory(working_directory, base_);
        const auto resolved = confine_guest_path(path, wd);
        if (behaviour_.walks) {
            co_await refuse_symlinked_ancestors(stat_fn(), resolved, wd, true);
        }
        const auto real = resolve(resolved, true);
        if (!real || !is_directory(*real)) {
            throw NotADirectory("not a directory", ENOTDIR);
        }
        const auto prefix = *real == "/" ? std::string("/") : *real + "/";
        const auto relative = *guest_path_relative_to(resolved, wd);
        std::vector<SandboxEntry> listing;
        for (const auto& [stored, node] : nodes) {
            if (stored.starts_with(prefix) &&
                stored.find('/', prefix.size()) == std::string::npos) {
                const auto name = stored.substr(prefix.size());
                auto entry = *reported(join_guest_path(resolved, name));
                entry.path = relative.empty() ? name : relative + "/" + name;
                listing.push_back(entry);
            }
        }
        co_return listing;
    }

    Task<void> remove(std::string path, std::string working_directory, bool recursive) override {
        const auto wd = resolve_working_directory(working_directory, base_);
        const auto target = normpath(join_guest_path(wd, path));
        std::exception_ptr refusal;
        std::optional<Node> leaf;
        try {
            const auto resolved = confine_guest_path(path, wd);
            if (resolved == wd) {
                throw ConfinementEscape("the working directory itself");
            }
            if (behaviour_.walks) {
                co_await refuse_symlinked_ancestors(stat_fn(), resolved, wd);
            }
            leaf = lstat_real(resolved);
            if (!leaf && behaviour_.remove_raises_on_missing) {
                throw FileNotFound("no such file", ENOENT);
            }
            if (leaf && leaf->kind == EntryKind::directory && !recursive &&
                !(behaviour_.remove_empty_directory_implicitly && is_empty(resolved))) {
                throw FileError("a directory needs recursive", EISDIR);
            }
        } catch (...) {
            refusal = std::current_exception();
        }
        if (refusal) {
            if (behaviour_.remove_destructive_refusal) {
                if (const auto real = resolve(target, true)) {
                    erase_tree(*real, false);
                }
            }
            std::rethrow_exception(refusal);
        }
        if (!leaf || behaviour_.remove_inert) {
            co_return;
        }
        if (behaviour_.remove_overbroad && recursive) {
            erase_tree(wd, false);
            nodes[wd] = {EntryKind::directory, "", ""};
            co_return;
        }
        const auto real_parent = *resolve(guest_dirname(target), true);
        const auto leaf_path = join_guest_path(real_parent, basename(target));
        if (leaf->kind == EntryKind::symlink) {
            if (behaviour_.remove_follows_links ||
                (recursive && behaviour_.recursive_remove_follows_links)) {
                if (const auto real = resolve(leaf_path, true)) {
                    erase_tree(*real, false);
                }
            }
            nodes.erase(leaf_path);
            co_return;
        }
        erase_tree(leaf_path, behaviour_.recursive_follows_interior_links);
    }

    Task<void> reclaim(std::string, std::string, Seconds) override {
        throw NotImplemented("the simulated guest does not reclaim");
        co_return;
    }

  private:
    static std::string basename(const std::string& path) {
        return path.substr(path.rfind('/') + 1);
    }

    int exit_code(int code) const { return behaviour_.exit_codes || code == 0 ? code : 1; }

    // The hostile word as an unquoted join would hand it to printf: $(echo X) substituted, and
    // only the first word kept.
    static std::string unquoted(std::string word) {
        const auto start = word.find("$(echo ");
        if (start != std::string::npos) {
            const auto end = word.find(')', start);
            word = word.substr(0, start) + word.substr(start + 7, end - start - 7) +
                   word.substr(end + 1);
        }
        return word.substr(0, word.find(' '));
    }

    Task<ExecResult> sleep(Seconds duration, Seconds timeout) {
        auto wait = [](Seconds how_long) -> Task<void> {
            boost::asio::steady_timer timer(
                co_await boost::asio::this_coro::executor,
                std::chrono::duration_cast<std::chrono::nanoseconds>(how_long));
            co_await timer.async_wait(boost::asio::use_awaitable);
        };
        if (duration <= timeout) {
            co_await wait(duration);
            co_return ExecResult{};
        }
        switch (behaviour_.timeout) {
            case TimeoutMode::bounded:
                co_await wait(timeout);
                throw Timeout("the caller's timeout expired");
            case TimeoutMode::instant:
                throw Timeout("an instant timeout");
            case TimeoutMode::late:
                co_await wait(Seconds{4.5});
                throw Timeout("a timeout of the backend's own");
            case TimeoutMode::returns:
                co_await wait(timeout);
                co_return ExecResult{};
        }
        co_return ExecResult{};
    }

    // Every link followed (the last one too when `follow_last`); nullopt when a component before
    // the last is missing or not a directory.
    std::optional<std::string> resolve(const std::string& path, bool follow_last,
                                       int depth = 0) const {
        if (depth > 40) {
            return std::nullopt;
        }
        std::vector<std::string> parts;
        const auto normal = normpath(path);
        for (std::size_t start = 1; start <= normal.size();) {
            const auto slash = normal.find('/', start);
            const auto end = slash == std::string::npos ? normal.size() : slash;
            if (end > start) {
                parts.push_back(normal.substr(start, end - start));
            }
            start = end + 1;
        }
        std::string current = "/";
        for (std::size_t i = 0; i < parts.size(); ++i) {
            const bool last = i + 1 == parts.size();
            const auto next = join_guest_path(current, parts[i]);
            const auto it = nodes.find(next);
            if (it == nodes.end()) {
                if (last) {
                    return next;
                }
                return std::nullopt;
            }
            if (it->second.kind == EntryKind::symlink && (!last || follow_last)) {
                const auto followed =
                    resolve(normpath(join_guest_path(guest_dirname(next), it->second.target)), true,
                            depth + 1);
                if (!followed || (!last && !is_directory(*followed))) {
                    return std::nullopt;
                }
                current = *followed;
                continue;
            }
            if (!last && it->second.kind != EntryKind::directory) {
                return std::nullopt;
            }
            current = next;
        }
        return current;
    }

    bool is_directory(const std::string& real) const {
        return real == "/" ||
               (nodes.count(real) > 0 && nodes.at(real).kind == EntryKind::directory);
    }

    bool is_empty(const std::string& path) const {
        const auto real = resolve(path, true);
        const auto prefix = *real + "/";
        const auto it = nodes.lower_bound(prefix);
        return it == nodes.end() || !it->first.starts_with(prefix);
    }

    bool exists(const std::string& path) const {
        const auto real = resolve(path, true);
        return real && (*real == "/" || nodes.count(*real) > 0);
    }

    // The node at `path` itself (parents followed, the leaf not).
    std::optional<Node> lstat_real(const std::string& path) const {
        if (normpath(path) == "/") {
            return Node{EntryKind::directory, "", ""};
        }
        const auto parent = resolve(guest_dirname(normpath(path)), true);
        if (!parent || !is_directory(*parent)) {
            return std::nullopt;
        }
        const auto it = nodes.find(join_guest_path(*parent, basename(normpath(path))));
        if (it == nodes.end()) {
            return std::nullopt;
        }
        return it->second;
    }

    // What this guest reports for a path: links become `other` when it cannot name them.
    std::optional<SandboxEntry> reported(const std::string& path) const {
        const auto node = lstat_real(path);
        if (!node) {
            return std::nullopt;
        }
        auto kind = node->kind;
        if (kind == EntryKind::symlink && !behaviour_.names_links) {
            kind = EntryKind::other;
        }
        std::optional<std::uint64_t> size;
        if (kind == EntryKind::file) {
            size = node->bytes.size();
        }
        return SandboxEntry{path, kind, size};
    }

    NoFollowStat stat_fn() const {
        return [this](std::string path) -> Task<std::optional<SandboxEntry>> {
            co_return reported(path);
        };
    }

    bool ensure_directory(const std::string& path) {
        if (normpath(path) == "/") {
            return true;
        }
        auto real = resolve(path, true);
        if (!real) {
            if (!ensure_directory(guest_dirname(normpath(path)))) {
                return false;
            }
            real = resolve(path, true);
            if (!real) {
                return false;
            }
        }
        if (const auto it = nodes.find(*real); it != nodes.end()) {
            return it->second.kind == EntryKind::directory;
        }
        nodes[*real] = {EntryKind::directory, "", ""};
        return true;
    }

    bool test(const std::string& flag, const std::string& path) const {
        if (flag == "-L") {
            const auto node = lstat_real(path);
            return node && node->kind == EntryKind::symlink;
        }
        const auto real = resolve(path, true);
        if (!real || !exists(path)) {
            return false;
        }
        if (flag == "-e") {
            return true;
        }
        if (flag == "-d") {
            return is_directory(*real);
        }
        return flag == "-f" && nodes.count(*real) && nodes.at(*real).kind == EntryKind::file;
    }

    void erase_tree(const std::string& real, bool follow_interior_links) {
        const auto prefix = real + "/";
        std::vector<std::string> doomed;
        for (const auto& [stored, node] : nodes) {
            if (stored == real || stored.starts_with(prefix)) {
                doomed.push_back(stored);
            }
        }
        // Targets are resolved before anything goes, while the path to each link still exists.
        std::vector<std::string> followed;
        for (const auto& stored : doomed) {
            if (follow_interior_links && nodes.at(stored).kind == EntryKind::symlink) {
                if (const auto target = resolve(stored, true); target && *target != real) {
                    followed.push_back(*target);
                }
            }
        }
        for (const auto& stored : doomed) {
            nodes.erase(stored);
        }
        for (const auto& target : followed) {
            nodes.erase(target);
        }
    }

    GuestBehaviour behaviour_;
    std::string base_;
};

// Answers only the EGRESS suite's curl: the first URL substring decides (exit code, http code);
// anything else is refused at L3 (exit 7, "000").
class CurlSandbox : public Sandbox {
  public:
    explicit CurlSandbox(std::vector<std::tuple<std::string, int, std::string>> answers)
        : answers_(std::move(answers)) {}

    std::string base_directory() const override { return kDefaultWorkDir; }
    Task<ExecResult> exec(ExecRequest request) override {
        const auto* argv = std::get_if<Argv>(&request.command);
        if (argv && argv->size() == 3 && (*argv)[2].find("curl ") != std::string::npos) {
            for (const auto& [url, exit, code] : answers_) {
                if ((*argv)[2].find(url) != std::string::npos) {
                    co_return ExecResult{code, "", exit};
                }
            }
            co_return ExecResult{"000", "", 7};
        }
        co_return ExecResult{"", "not curl", 127};
    }
    Task<ExecResult> run_code(std::string, Seconds) override { co_return ExecResult{}; }
    Task<void> write_file(std::string, std::string, std::string) override { co_return; }
    Task<std::optional<SandboxEntry>> stat_file(std::string, std::string) override {
        co_return std::nullopt;
    }
    Task<std::string> read_file(std::string, std::string, std::uint64_t) override {
        co_return std::string();
    }
    Task<std::vector<SandboxEntry>> list_dir(std::string, std::string) override {
        co_return std::vector<SandboxEntry>{};
    }
    Task<void> remove(std::string, std::string, bool) override { co_return; }
    Task<void> reclaim(std::string, std::string, Seconds) override { co_return; }

  private:
    std::vector<std::tuple<std::string, int, std::string>> answers_;
};

}  // namespace maf_sandbox::testing
