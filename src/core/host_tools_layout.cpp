// The guest side of host tools over exec: where a run's files live, the sh launcher that starts
// the program detached, and the Python shim the program imports.
#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/host_tools_over_exec.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox {

namespace {

constexpr const char* kLauncherName = "run_program.sh";
constexpr const char* kOutputName = "program_output.txt";
constexpr const char* kExitName = "program_exit_code";
constexpr const char* kPidName = "program_pid";
constexpr const char* kSessionName = "program_session";

const std::set<std::string, std::less<>> kTransportNames{kShimModule,
                                                         kLauncherName,
                                                         kOutputName,
                                                         kExitName,
                                                         "program_exit_code.part",
                                                         kPidName,
                                                         "program_pid.part",
                                                         kSessionName,
                                                         "program_session.part",
                                                         kCallsDirectory};

// Modules a program file must not shadow: the shim, what the shim imports, and what Python imports
// at startup before the program runs.
const std::set<std::string, std::less<>> kReservedModules{
    "maf_host_tools", "json",          "os",
    "time",           "encodings",     "site",
    "sitecustomize",  "usercustomize", "abc",
    "codecs",         "genericpath",   "io",
    "posixpath",      "stat",          "_collections_abc",
    "_sitebuiltins",  "_bootlocale"};

const std::set<std::string, std::less<>> kPythonKeywords{
    "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
    "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
    "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
    "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield"};

const std::set<std::string, std::less<>> kShimGlobals{
    "json", "os", "time", "call", "HostToolError", "CALLS", "CALL_TIMEOUT"};

// True when importing the stem of `program` would load it: a Python source, bytecode or
// extension suffix, or a multi-dot extension name such as x.cpython-311.so.
bool answers_to_module(std::string_view program, std::string& stem) {
    const auto first_dot = program.find('.');
    if (first_dot == std::string_view::npos) {
        return false;
    }
    stem = std::string(program.substr(0, first_dot));
    const auto suffix = program.substr(program.rfind('.') + 1);
    return suffix == "py" || suffix == "pyc" || suffix == "pyw" || suffix == "so" ||
           suffix == "pyd";
}

bool is_identifier(std::string_view name) {
    if (name.empty() || (name[0] >= '0' && name[0] <= '9')) {
        return false;
    }
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_';
    });
}

// Writes `value` to `path` so a reader sees either nothing or all of it.
std::string publish(std::string_view value, const std::string& path) {
    return fmt::format("echo {} > {} && mv -f {} {}", value, shell_quote(path + ".part"),
                       shell_quote(path + ".part"), shell_quote(path));
}

}  // namespace

GuestRunLayout guest_run_layout(std::string_view run_directory, std::string_view program) {
    if (run_directory.empty() || run_directory.front() != '/') {
        throw InvalidArgument(
            fmt::format("the run directory '{}' is not absolute; give an absolute guest directory",
                        run_directory));
    }
    if (run_directory.find_first_of(":\\") != std::string_view::npos) {
        throw InvalidArgument(fmt::format(
            "the run directory '{}' holds ':' or a backslash, which would break PYTHONPATH; "
            "choose another directory",
            run_directory));
    }
    const auto directory = normpath(run_directory);
    if (directory == "/" || directory.rfind("//", 0) == 0) {
        throw InvalidArgument(
            fmt::format("the run directory '{}' cannot hold a run; choose a directory below the "
                        "root",
                        run_directory));
    }
    const bool plain =
        !program.empty() && program != "." && program != ".." &&
        program.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos;
    if (!plain) {
        throw InvalidArgument(fmt::format(
            "the program name '{}' is not a plain file name; name a file such as 'program.py'",
            program));
    }
    if (kTransportNames.count(program) > 0) {
        throw InvalidArgument(fmt::format(
            "the program name '{}' is a file of the host-tool transport; choose another name",
            program));
    }
    std::string stem;
    if (answers_to_module(program, stem) && kReservedModules.count(stem) > 0) {
        throw InvalidArgument(fmt::format(
            "the program name '{}' would shadow the Python module '{}'; choose another name",
            program, stem));
    }
    GuestRunLayout layout;
    layout.directory = directory;
    layout.work = join_guest_path(directory, kWorkDirectory);
    layout.transport = join_guest_path(directory, kTransportDirectory);
    layout.program = join_guest_path(layout.transport, program);
    layout.shim = join_guest_path(layout.transport, kShimModule);
    layout.launcher = join_guest_path(layout.transport, kLauncherName);
    layout.calls = join_guest_path(layout.transport, kCallsDirectory);
    layout.output = join_guest_path(layout.transport, kOutputName);
    layout.exit_code = join_guest_path(layout.transport, kExitName);
    layout.pid = join_guest_path(layout.transport, kPidName);
    layout.session = join_guest_path(layout.transport, kSessionName);
    return layout;
}

std::string launcher_script(const GuestRunLayout& layout, std::string_view interpreter) {
    const auto inner = fmt::format(
        "PYTHONUNBUFFERED=1 PYTHONNOUSERSITE=1 {} {} > {} 2>&1 < /dev/null & {}; wait $!; "
        "{}",
        shell_quote(interpreter), shell_quote(layout.program), shell_quote(layout.output),
        publish("$!", layout.pid), publish("$?", layout.exit_code));
    const auto in_session = publish("$$", layout.session) + "; " + inner;
    const auto run = shell_quote(layout.directory);
    return fmt::format(
        "#!/bin/sh\n"
        "# Generated by maf-sandbox: starts one program detached for host tools over exec.\n"
        "mkdir -p -- {work} {calls} || exit 1\n"
        "cd -- {work} || exit 1\n"
        "maf_path={transport}\n"
        "set -f\n"
        "maf_ifs=$IFS\n"
        "IFS=:\n"
        "for maf_entry in ${{PYTHONPATH-}}; do\n"
        "  case $maf_entry in /*) ;; *) continue ;; esac\n"
        "  case $maf_entry in */./*|*/../*|*//*|*/.|*/..) continue ;; esac\n"
        "  case $maf_entry in {run}|{run}/*) continue ;; esac\n"
        "  maf_path=$maf_path:$maf_entry\n"
        "done\n"
        "IFS=$maf_ifs\n"
        "set +f\n"
        "PYTHONPATH=$maf_path\n"
        "export PYTHONPATH\n"
        "if command -v setsid > /dev/null 2>&1; then\n"
        "  setsid nohup sh -c {in_session} > /dev/null 2>&1 < /dev/null &\n"
        "  echo {marker}\n"
        "else\n"
        "  nohup sh -c {inner} > /dev/null 2>&1 < /dev/null &\n"
        "fi\n"
        "exit 0\n",
        fmt::arg("work", shell_quote(layout.work)), fmt::arg("calls", shell_quote(layout.calls)),
        fmt::arg("transport", shell_quote(layout.transport)), fmt::arg("run", run),
        fmt::arg("in_session", shell_quote(in_session)), fmt::arg("inner", shell_quote(inner)),
        fmt::arg("marker", shell_quote(kSessionMarker)));
}

std::string host_tool_shim(const std::vector<std::string>& names, Seconds call_timeout) {
    if (!std::isfinite(call_timeout.count()) || call_timeout.count() <= 0) {
        throw InvalidArgument("the shim's call timeout must be a finite number of seconds above 0");
    }
    std::string wrappers;
    for (const auto& name : names) {
        if (is_identifier(name) && kPythonKeywords.count(name) == 0 &&
            kShimGlobals.count(name) == 0) {
            wrappers += fmt::format(
                "\n\ndef {0}(**arguments):\n    return call(\"{0}\", **arguments)\n", name);
        }
    }
    return fmt::format(
        R"(# Generated by maf-sandbox: calls host tools through request and response files.
import json
import os
import time

CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "{calls}")
CALL_TIMEOUT = {timeout}


class HostToolError(Exception):
    """The host refused the call, or did not answer in time."""


def _claim():
    number = 1
    while True:
        path = os.path.join(CALLS, "%04d.claim" % number)
        try:
            handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            number += 1
            continue
        os.close(handle)
        return number


def _publish(number, body):
    final = os.path.join(CALLS, "%04d.request.json" % number)
    part = final + ".part"
    with open(part, "w", encoding="utf-8") as handle:
        json.dump(body, handle, ensure_ascii=False, allow_nan=False)
    os.replace(part, final)


def call(name, **arguments):
    number = _claim()
    try:
        _publish(number, {{"id": number, "name": name, "arguments": arguments}})
    except BaseException:
        _publish(number, {{"id": number, "abandoned": True}})
        raise
    response = os.path.join(CALLS, "%04d.response.json" % number)
    deadline = time.monotonic() + CALL_TIMEOUT
    while time.monotonic() < deadline:
        try:
            with open(response, encoding="utf-8") as handle:
                answer = json.load(handle)
        except (FileNotFoundError, ValueError):
            time.sleep(0.05)
            continue
        if "value" in answer:
            return answer["value"]
        raise HostToolError(answer.get("refusal", "the host refused the call"))
    raise HostToolError("the host did not answer %r within %s seconds" % (name, CALL_TIMEOUT))
{wrappers})",
        fmt::arg("calls", kCallsDirectory), fmt::arg("timeout", call_timeout.count()),
        fmt::arg("wrappers", wrappers));
}

}  // namespace maf_sandbox
