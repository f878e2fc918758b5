#!/usr/bin/env bash
# Exit statuses by Docker's convention, on both front ends (issue 27 item 5): the program's own
# status passes through, 126 is a program that cannot be run, 127 one that is not found, and 125
# is maf-sandbox's own failure, which no program status below 125 can be mistaken for.
#   exit_codes.sh MAF_SANDBOX
# The lean front end is also tested as a copy alone in an empty directory: with no full CLI to
# hand over to, whatever that copy answers it answered itself.
set -u
bin=$1
full=$(dirname "$bin")/maf-sandbox-cli
failures=0
work=$(mktemp -d /tmp/maf-cli-exit-XXXXXX)
export MAF_SANDBOX_STATE_DIR=$work/state
scope=cli-exit-$$
mkdir -p "$work/alone"
cp "$bin" "$work/alone/maf-sandbox"
alone=$work/alone/maf-sandbox
cleanup() {
    "$bin" purge --scope "$scope" --thread t >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
out=$work/out err=$work/err

source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

run=(run --backend local --floor container)
warm=(exec --backend local --floor container --scope "$scope" --thread t)

# The full CLI, every case through `run` (a fresh sandbox each time) and `exec`.
expect_run 0 "full CLI: a program that succeeds exits 0" -- "$full" "${run[@]}" -- true
expect_run 7 "full CLI: the program's own status passes through" -- "$full" "${run[@]}" -- sh -c 'exit 7'
expect_run 143 "full CLI: a program killed by a signal exits 128+signal, its shell's status" -- \
    "$full" "${run[@]}" -- sh -c 'kill -TERM $$'
expect_run 127 "full CLI: a program that is not found exits 127" -- "$full" "${run[@]}" -- no-such-program-i27
stderr_has "no-such-program-i27"
expect_run 126 "full CLI: a file that cannot be executed exits 126" -- "$full" "${run[@]}" -- /etc/passwd
stderr_has "/etc/passwd"
expect_run 125 "full CLI: bad flags are its own failure" -- "$full" "${run[@]}" --memory -5 -- true
expect_run 125 "full CLI: an unknown command is its own failure" -- "$full" no-such-command
expect_run 125 "full CLI: a policy refusal is its own failure" -- "$full" run --backend local -- true
stderr_has "--floor container"
expect_run 125 "full CLI: a timeout that stops the program is its own failure" -- \
    "$full" "${run[@]}" --timeout 0.5 -- sleep 30
stderr_has "timeout"
expect_run 125 "full CLI: rm of an unknown id is its own failure" -- "$full" rm no-such-sandbox-i27
expect_run 125 "full CLI: a result it cannot write to stdout is its own failure, not the program's 0" -- \
    sh -c '"$0" "$@" >/dev/full' "$full" "${run[@]}" -- echo lost
stderr_has "could not be written"
expect_run 125 "full CLI: a listing it cannot write to stdout fails" -- sh -c '"$0" ls --json >/dev/full' "$full"
stderr_has "standard output"
expect_run 0 "full CLI: --help documents the exit statuses" -- "$full" --help
stdout_has "125"
stdout_has "127"
expect_run 0 "full CLI: the first exec of a key creates it" -- "$full" "${warm[@]}" -- true
expect_run 9 "full CLI: exec passes the status through" -- "$full" "${warm[@]}" -- sh -c 'exit 9'
expect_run 127 "full CLI: exec of a missing program exits 127" -- "$full" "${warm[@]}" -- no-such-program-i27
expect_run 126 "full CLI: exec of a file that cannot be executed exits 126" -- "$full" "${warm[@]}" -- /etc/passwd

# The lean front end alone serves the warm exec of that key.
expect_run 0 "lean: a warm exec it serves itself exits 0" -- "$alone" "${warm[@]}" -- true
expect_run 9 "lean: the program's own status passes through" -- "$alone" "${warm[@]}" -- sh -c 'exit 9'
expect_run 127 "lean: a program that is not found exits 127" -- "$alone" "${warm[@]}" -- no-such-program-i27
stderr_has "no-such-program-i27"
expect_run 126 "lean: a file that cannot be executed exits 126" -- "$alone" "${warm[@]}" -- /etc/passwd
expect_run 125 "lean: a timeout that stops the program is its own failure" -- \
    "$alone" "${warm[@]}" --timeout 0.5 -- sleep 30
expect_run 125 "lean: output it cannot write to stdout is its own failure" -- \
    sh -c '"$0" "$@" >/dev/full' "$alone" "${warm[@]}" -- echo lost
stderr_has "could not be written"
expect_run 125 "lean: with no full CLI to hand a command to, it fails as itself" -- "$alone" ls
stderr_has "maf-sandbox-cli"
# And handing over keeps the full CLI's statuses.
expect_run 125 "lean: a malformed value handed to the full CLI exits 125" -- "$bin" "${warm[@]}" --max-output -5 -- true
expect_run 127 "lean: a cold run handed to the full CLI keeps 127" -- "$bin" "${run[@]}" -- no-such-program-i27

# An exec racing a purge of its key: it runs, is handed to a new sandbox, or fails as the sandbox's
# failure (125), or its program is killed by the purge (137, the program's status). It never exits
# 1 or 2, the codes programs use for their own failures (before issue 27 it could exit 2, "bad
# input", on a record removed under it).
statuses=$work/race-statuses
for round in 1 2 3 4 5 6; do
    "$bin" "${warm[@]}" -- true >/dev/null 2>&1
    for i in 1 2 3; do
        ("$alone" "${warm[@]}" -- sh -c 'exit 0' >/dev/null 2>&1; echo $? >>"$statuses") &
    done
    "$bin" purge --scope "$scope" --thread t >/dev/null 2>&1
    wait
done
bad=$(grep -cvxE '0|125|137' "$statuses")
[[ $bad -eq 0 ]] || { echo "FAIL: an exec racing a purge exited $(sort "$statuses" | uniq -c | tr '\n' ' ')"; failures=$((failures + 1)); }
[[ $(wc -l <"$statuses") -eq 18 ]] || { echo "FAIL: $(wc -l <"$statuses") racing execs reported, wanted 18"; failures=$((failures + 1)); }
echo "ok: 18 execs racing a purge exited $(sort "$statuses" | uniq -c | tr '\n' ' ')"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
