#!/usr/bin/env bash
# Runs the CLI the way the README and issue 2 promise it behaves.
set -u
bin=$1
specs=$2
failures=0
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
one_line_stderr() {
    local n; n=$(grep -c . "$err")
    [[ $n -eq 1 ]] || { echo "FAIL: stderr has $n lines, wanted one: $(cat "$err")"; failures=$((failures + 1)); }
    ! grep -qi "terminate called\|stack\|what():" "$err" || { echo "FAIL: stack trace on stderr"; failures=$((failures + 1)); }
}

expect 0 "version" -- --version
stdout_has "maf-sandbox"

expect 0 "a spec the in-process backend can serve" -- check --spec "$specs/served.json" --floor none --backend in-process
stdout_has "in-process"

expect 1 "the default microvm floor refuses an isolation-none backend" -- check --spec "$specs/served.json" --backend in-process
stdout_has "SandboxBackendNotPermitted"

expect 1 "a capability the backend does not declare is refused" -- check --spec "$specs/needs_exec.json" --floor none --backend in-process
stdout_has "SandboxCapabilityNotSupported"

for bad in unknown_egress wrong_type missing_kind malformed allow_without_allowlist; do
    expect 125 "bad input: $bad" -- check --spec "$specs/$bad.json" --floor none --backend in-process
    one_line_stderr
done
expect 125 "bad input names the field" -- check --spec "$specs/unknown_egress.json" --floor none --backend in-process
stderr_has "egress"
expect 125 "the old rung name is refused" -- check --spec "$specs/served.json" --floor process --backend in-process
one_line_stderr
expect 125 "a missing spec file" -- check --spec "$specs/does-not-exist.json" --floor none --backend in-process
one_line_stderr

expect 0 "conformance on the in-process backend" -- conformance --backend in-process --floor none
last=$(tail -n 1 "$out")
[[ $last =~ ^[0-9]+\ passed,\ 0\ failed ]] || { echo "FAIL: last line '$last'"; failures=$((failures + 1)); }
[[ $(grep -c "^FILES_OUT .* PASS" "$out") -eq 12 ]] || { echo "FAIL: not all 12 FILES_OUT probes passed"; cat "$out"; failures=$((failures + 1)); }

expect 125 "conformance refuses a floor above the backend's rung (it cannot run, so no answer)" -- conformance --backend in-process

for cmd in check conformance; do
    expect 0 "$cmd --help" -- "$cmd" --help
done

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
