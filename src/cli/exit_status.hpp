// Exit statuses shared by every command, the full CLI's and the lean front end's. They follow
// Docker's convention so that a script can tell "the sandbox failed" from "your program failed":
// the program's own status passes through untouched, 126 and 127 are a program that could not be
// run or found (as a shell reports them), and 125 is maf-sandbox's own failure, which no program
// status in 0-124 can be mistaken for.
#pragma once

namespace maf_sandbox::cli {

inline constexpr int kExitOk = 0;
// The answer "no" of a command that answers a question: `check` (the router refuses the spec) and
// `conformance` (a probe failed). Not a failure of the command: it ran and answered.
inline constexpr int kExitNo = 1;
// maf-sandbox itself or its backend could not do what was asked: bad flags or input, a policy
// refusal, a backend or service error, a timeout or output cap that stopped the program, an output
// that could not land, a result that could not be written to stdout.
inline constexpr int kExitFailed = 125;
// Set by the program's side (the sandbox's exec server, or the guest shell on ACAS), never by the
// CLI: named here for the documentation and the tests.
inline constexpr int kExitCannotRun = 126;
inline constexpr int kExitNotFound = 127;

// These were once 1 and 2, the same codes guest programs use; both are now the CLI's
// own failure. Kept as names so that a caller reads as what it means.
inline constexpr int kExitRefused = kExitFailed;
inline constexpr int kExitBadInput = kExitFailed;

// The --help footer of both front ends.
inline constexpr const char* kExitStatusHelp =
    "Exit status: a program run by `run` or `exec` exits with its own status; 126 when it could "
    "not be run, 127 when it was not found; 125 when maf-sandbox itself failed (bad flags or "
    "input, a refusal, a backend error, a timeout or the output cap stopping the program, an "
    "output that could not land). `check` and `conformance` exit 1 for their answer \"no\" "
    "(refused, a probe failed).";

}  // namespace maf_sandbox::cli
