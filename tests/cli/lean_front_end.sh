#!/usr/bin/env bash
# The lean front end (`maf-sandbox`) against the full CLI (`maf-sandbox-cli`) it hands the rest
# to, as a user types the commands:
#   lean_front_end.sh MAF_SANDBOX
# A copy of the front end alone in an empty directory has no full CLI to fall back to, so every
# command that copy completes was served by the front end itself.
set -u
bin=$1
failures=0
work=$(mktemp -d /tmp/maf-cli-lean-XXXXXX)
export MAF_SANDBOX_STATE_DIR=$work/state
scope=cli-lean-$$
mkdir -p "$work/alone"
cp "$bin" "$work/alone/maf-sandbox"
alone=$work/alone/maf-sandbox
cleanup() {
    "$bin" pool drain >/dev/null 2>&1
    "$bin" purge --scope "$scope" --thread t >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
out=$work/out err=$work/err

source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
count_sandboxes() { "$bin" ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }

warm=(exec --backend local --floor container --scope "$scope" --thread t)

expect_run 0 "--version is answered by the front end" -- "$alone" --version
stdout_is "$("$bin"-cli --version)"
expect_run 125 "without a full CLI beside it, a command it does not serve says what to reinstall" -- "$alone" ls
stderr_has "maf-sandbox-cli"

expect_run 0 "the first exec of a key creates the sandbox through the full CLI" -- "$bin" "${warm[@]}" -- sh -c 'echo made > /tmp/mark; echo first'
stdout_is "first"
expect_run 0 "a warm exec is served by the front end alone, in the same sandbox" -- "$alone" "${warm[@]}" -- cat /tmp/mark
stdout_is "made"
expect_run 7 "the exit status passes through" -- "$alone" "${warm[@]}" -- sh -c 'echo out; echo err >&2; exit 7'
stdout_is "out"
stderr_has "^err"
expect_run 0 "--flag=value spellings and the command's own flags after --" -- "$alone" exec --backend=local --floor=container --scope="$scope" --thread=t -- ls -d --color=never /
stdout_is "/"
expect_run 0 "output past --max-output keeps the head and names the dropped bytes" -- "$alone" "${warm[@]}" --max-output 10 -- sh -c 'head -c 100 /dev/zero | tr "\0" x'
stdout_is "xxxxxxxxxx"
stderr_has "90 bytes dropped"
expect_run 125 "a timeout kills the command and says so" -- "$alone" "${warm[@]}" --timeout 0.5 -- sleep 5
stderr_has "timeout"
expect_run 0 "a working directory default is the sandbox's work directory" -- "$alone" "${warm[@]}" -- pwd
stdout_is "/maf-sandbox/work"
expect_run 125 "a floor above container goes to the full CLI's refusal" -- "$bin" exec --backend local --scope "$scope" --thread t -- true
stderr_has "--floor container"
expect_run 125 "a malformed value goes to the full CLI's validation" -- "$bin" "${warm[@]}" --max-output -5 -- true
expect_run 0 "another key is created through the full CLI" -- "$bin" exec --backend local --floor container --scope "$scope" --thread t --kind other -- echo other
stdout_is "other"

# One-shot run from the shared pool.
expect_run 0 "pool set builds the pool" -- "$bin" pool set --size 1
expect_run 0 "pool show reports it ready" -- "$bin" pool show
stdout_is "size 1 image host ready 1"
expect_run 0 "a run matching the pool is served by the front end alone" -- "$alone" run --backend local --floor container -- sh -c 'echo pooled; exit 0'
stdout_is "pooled"
expect_run 0 "pool fill tops the pool up" -- "$bin" pool fill
expect_run 3 "a pooled run keeps the exit status" -- "$bin" run --backend local --floor container -- sh -c 'exit 3'
for _ in $(seq 100); do
    [[ "$("$bin" pool show)" == "size 1 image host ready 1" ]] && break
    sleep 0.1
done
expect_run 0 "the run's detached filler tops the pool up again" -- "$bin" pool show
stdout_is "size 1 image host ready 1"
expect_run 0 "a run whose limits differ from the pool's launches through the full CLI" -- "$bin" run --backend local --floor container --memory 300000000 -- echo cold
stdout_is "cold"
for _ in $(seq 100); do  # the last pooled run's reaper
    [[ "$(count_sandboxes)" == "3" ]] && break
    sleep 0.1
done
expect_run 0 "a pooled run's sandbox is reaped: the two exec sandboxes and the pool's are left" -- count_sandboxes
stdout_is "3"
expect_run 0 "pool drain removes the pool and its sandboxes" -- "$bin" pool drain
stdout_is "1"
expect_run 0 "nothing but the two exec sandboxes is left" -- count_sandboxes
stdout_is "2"
leftover=$(ls "$MAF_SANDBOX_STATE_DIR/sandboxes" | wc -l)
[[ $leftover -eq 2 ]] || { echo "FAIL: $leftover sandbox directories left, wanted 2"; failures=$((failures + 1)); }
expect_run 0 "without a pool, run launches through the full CLI" -- "$bin" run --backend local --floor container -- echo fresh
stdout_is "fresh"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
