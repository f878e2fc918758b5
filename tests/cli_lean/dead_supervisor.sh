#!/usr/bin/env bash
# The lean front end's warm exec after the key's supervisor was SIGKILLed says what the full CLI
# says: the sandbox was replaced and its state lost, then runs the command in the new sandbox with
# the program's own status. The exec follows the kill at once, so it often meets a supervisor whose
# socket is closed while /proc still shows it alive (the case the front end used to answer 125):
# every round must say it, whichever way the race goes.
#   dead_supervisor.sh MAF_SANDBOX ROUNDS
set -u
bin=$1
rounds=${2:-6}
failures=0
work=$(mktemp -d /tmp/maf-cli-lean-dead-XXXXXX)
export MAF_SANDBOX_STATE_DIR=$work/state
scope=cli-lean-dead-$$
cleanup() {
    "$bin" purge --scope "$scope" --thread t >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
out=$work/out err=$work/err
source "$(dirname "${BASH_SOURCE[0]}")/../cli/expect.sh"
warm=(exec --backend local --floor container --scope "$scope" --thread t)

# The id and supervisor pid of the key's one live sandbox, from its registry record.
live_sandbox() {
    python3 - "$MAF_SANDBOX_STATE_DIR" "$scope" <<'PY'
import glob, json, sys
state, scope = sys.argv[1], sys.argv[2]
for path in glob.glob(f"{state}/sandboxes/*/record.json"):
    record = json.load(open(path))
    if record["labels"].get("scope") == scope and record.get("state") == "running":
        print(record["id"], record["supervisor"]["pid"])
PY
}

expect_run 0 "the first exec creates the key's sandbox" -- "$bin" "${warm[@]}" -- sh -c 'echo kept > /tmp/mark'
stderr_lacks() { ! grep -q -- "$1" "$err" || { echo "FAIL: stderr has '$1': $(head -c 400 "$err")"; failures=$((failures + 1)); }; }
stderr_lacks "sandbox replaced"
expect_run 0 "a warm exec sees the sandbox's file" -- "$bin" "${warm[@]}" -- cat /tmp/mark
stdout_is "kept"

for round in $(seq 1 "$rounds"); do
    read -r id pid < <(live_sandbox)
    if [[ -z ${pid:-} ]]; then
        echo "FAIL: round $round: no live sandbox recorded for the key"
        failures=$((failures + 1))
        break
    fi
    kill -KILL "$pid"
    expect_run 3 "round $round: the exec right after the supervisor's kill runs in a new sandbox" -- \
        "$bin" "${warm[@]}" -- sh -c 'cat /tmp/mark 2>/dev/null; echo after; exit 3'
    stdout_is "after"
    stderr_has "sandbox replaced, state lost: the supervisor of sandbox $id had died"
    expect_run 0 "round $round: the loss is told once" -- "$bin" "${warm[@]}" -- sh -c 'echo kept > /tmp/mark'
    stderr_lacks "sandbox replaced"
done
[[ $failures -eq 0 ]]
