// The bad-path battery every backend's Sandbox must refuse: NUL bytes, invalid UTF-8 and traversal
// (`..`, absolute escapes, /proc/self/root walks, backslashes) in the path and in the working
// directory of every path-taking call. Shared by the in-process fake (unit) and the local and ACAS
// backends (integration).
#pragma once

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::badinput {

struct BadPath {
    std::string name;
    std::string path;
    std::string working_directory;  // "" names the sandbox's base
    // Reclaim runs `rm -rf` inside the guest as the guest user, so a path inside the working
    // directory that only a host-side resolver would misread (a /proc walk) may be reclaimed.
    bool reclaim_may_run = false;
};

inline std::vector<BadPath> bad_paths(const std::string& outside_dir = "/tmp/maf-badinput") {
    using namespace std::string_literals;
    return {
        {"nul in the path", "a\0b"s, ""},
        {"a lone nul", "\0"s, ""},
        {"nul in the working directory", "a", "sub\0x"s},
        {"a lone continuation byte",
         "\x80"
         "abc",
         ""},
        {"a truncated sequence", "a\xc3", ""},
        {"an overlong slash",
         "..\xc0\xaf..\xc0\xaf"
         "etc\xc0\xafpasswd",
         ""},
        {"a UTF-16 surrogate", "x\xed\xa0\x80", ""},
        {"invalid UTF-8 in the working directory", "a", "w\xff"},
        {"dot-dot", "..", ""},
        {"dot-dot escape", "../../../../../../../../etc/passwd", ""},
        {"nested dot-dot escape", "a/b/../../../x", ""},
        {"dot-dot to a host directory", "../../../../../../../.." + outside_dir + "/sentinel", ""},
        {"absolute escape", "/etc/passwd", ""},
        {"absolute host directory", outside_dir + "/sentinel", ""},
        {"proc self root dot-dot", "/proc/self/root/..", ""},
        {"proc self root walk", "/proc/self/root" + outside_dir + "/sentinel", ""},
        {"proc 1 root walk", "/proc/1/root/etc/passwd", ""},
        {"backslash traversal", "..\\..\\etc\\passwd", ""},
    };
}

// Runs one awaitable to completion; stops the loop when it finishes, so pooled connections or
// servers sharing the io_context cannot keep it running.
template <typename T>
T drive(boost::asio::io_context& io, Task<T> task) {
    std::exception_ptr failure;
    std::optional<T> result;
    boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T value) {
        failure = e;
        if (!e) {
            result.emplace(std::move(value));
        }
        io.stop();
    });
    io.restart();
    io.run();
    if (failure) {
        std::rethrow_exception(failure);
    }
    return std::move(*result);
}

inline void drive(boost::asio::io_context& io, Task<void> task) {
    std::exception_ptr failure;
    boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) {
        failure = e;
        io.stop();
    });
    io.restart();
    io.run();
    if (failure) {
        std::rethrow_exception(failure);
    }
}

enum class AlsoAccept { nothing, not_implemented_or_file_error };

// The call must throw InvalidArgument (ConfinementEscape is one); `also` widens that for reclaim,
// whose refusals are documented as NotImplemented (withheld) or a FileError carrying the reason.
inline void expect_refused(const std::string& what, const std::function<void()>& call,
                           AlsoAccept also = AlsoAccept::nothing) {
    try {
        call();
        ADD_FAILURE() << what << ": accepted";
    } catch (const InvalidArgument&) {
    } catch (const NotImplemented& e) {
        if (also == AlsoAccept::nothing) {
            ADD_FAILURE() << what << ": NotImplemented: " << e.what();
        }
    } catch (const FileError& e) {
        if (also == AlsoAccept::nothing) {
            ADD_FAILURE() << what << ": " << e.type_name()
                          << " instead of InvalidArgument: " << e.what();
        }
    } catch (const Error& e) {
        ADD_FAILURE() << what << ": " << e.type_name()
                      << " instead of InvalidArgument: " << e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": " << typeid(e).name()
                      << " instead of InvalidArgument: " << e.what();
    }
}

// Every path-taking call of `sandbox` with every bad path.
inline void expect_every_path_call_refuses(boost::asio::io_context& io, Sandbox& sandbox,
                                           const std::vector<BadPath>& cases) {
    for (const auto& bad : cases) {
        const auto& p = bad.path;
        const auto& wd = bad.working_directory;
        expect_refused("write_file: " + bad.name,
                       [&] { drive(io, sandbox.write_file(p, "payload", wd)); });
        expect_refused("stat_file: " + bad.name, [&] { drive(io, sandbox.stat_file(p, wd)); });
        expect_refused("read_file: " + bad.name,
                       [&] { drive(io, sandbox.read_file(p, wd, 1 << 20)); });
        expect_refused("list_dir: " + bad.name, [&] { drive(io, sandbox.list_dir(p, wd)); });
        expect_refused("remove: " + bad.name, [&] { drive(io, sandbox.remove(p, wd, false)); });
        expect_refused("remove recursive: " + bad.name,
                       [&] { drive(io, sandbox.remove(p, wd, true)); });
        if (bad.reclaim_may_run) {
            try {
                drive(io, sandbox.reclaim(p, wd, Seconds{10.0}));
            } catch (const Error&) {
            }
        } else {
            expect_refused(
                "reclaim: " + bad.name, [&] { drive(io, sandbox.reclaim(p, wd, Seconds{10.0})); },
                AlsoAccept::not_implemented_or_file_error);
        }
    }
}

// An exec whose working directory carries a NUL or invalid UTF-8 is refused before it runs.
inline void expect_exec_refuses_bad_working_directories(boost::asio::io_context& io,
                                                        Sandbox& sandbox) {
    using namespace std::string_literals;
    for (const auto& wd : {"/tmp\0/x"s, "/tmp/\xff"s, "\xc0\xaf"s}) {
        ExecRequest request;
        request.command = "touch executed";
        request.working_directory = wd;
        request.timeout = Seconds{10.0};
        expect_refused("exec in a bad working directory",
                       [&] { drive(io, sandbox.exec(request)); });
    }
}

}  // namespace maf_sandbox::badinput
