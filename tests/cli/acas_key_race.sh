#!/usr/bin/env bash
# Issue 27 item 1: PROCESSES separate `maf-sandbox exec --backend acas` processes race one cold
# conversation key through a running acas-emulator, ROUNDS times (run through with_emulator.sh):
#   acas_key_race.sh MAF_SANDBOX ENDPOINT CA_FILE TOKEN [PROCESSES] [ROUNDS]
# Each process appends its own line to one file in the key's sandbox. Afterwards the key holds
# exactly one sandbox (zero duplicates) and that file holds every process's line (zero lost
# writes): a write that went to a losing duplicate would be missing from it.
set -u
bin=$1 endpoint=$2 ca_file=$3 token=$4 processes=${5:-8} rounds=${6:-3}
failures=0
work=$(mktemp -d /tmp/maf-cli-race-XXXXXX)
trap 'rm -rf "$work"' EXIT
out=$work/out err=$work/err
acas=(--backend acas --endpoint "$endpoint" --subscription-id sub --resource-group rg
      --sandbox-group grp --ca-file "$ca_file" --token "$token" --emulator)
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# Prints "<sandboxes not being deleted> <all sandboxes>" of a thread, from `ls --json`.
count_sandboxes() {
    "$bin" ls "${acas[@]}" --label scope=race --label "thread=$1" --json >"$work/ls" 2>"$err" || {
        echo "ls failed: $(head -c 400 "$err")" >&2; echo "? ?"; return; }
    python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(sum(1 for s in v if s["state"] != "Deleting"), len(v))' "$work/ls"
}

for round in $(seq 1 "$rounds"); do
    thread=race-$round
    key=(--scope race --thread "$thread")
    pids=()
    for i in $(seq 1 "$processes"); do
        "$bin" exec "${acas[@]}" --floor container "${key[@]}" -- sh -c "echo writer-$i >> writers" \
            >"$work/$round.$i.out" 2>"$work/$round.$i.err" &
        pids+=($!)
    done
    for i in $(seq 1 "$processes"); do
        wait "${pids[$((i - 1))]}"
        rc=$?
        if [[ $rc -ne 0 ]]; then
            echo "FAIL: round $round: process $i exited $rc: $(head -c 600 "$work/$round.$i.err")"
            failures=$((failures + 1))
        fi
        if grep -q "sandbox replaced" "$work/$round.$i.err"; then
            echo "FAIL: round $round: process $i was told its sandbox was replaced"
            failures=$((failures + 1))
        fi
    done
    read -r live total < <(count_sandboxes "$thread")
    if [[ $live != 1 ]]; then
        echo "FAIL: round $round: the key holds $live live sandboxes ($total listed), wanted 1"
        failures=$((failures + 1))
    else
        echo "ok: round $round: one live sandbox for the key after $processes racing processes"
    fi
    # Losers were only asked to go: they must be gone soon, not linger (poll, bounded).
    for _ in $(seq 1 150); do
        [[ $total == 1 ]] && break
        sleep 0.2
        read -r live total < <(count_sandboxes "$thread")
    done
    [[ $total == 1 ]] || { echo "FAIL: round $round: $total sandboxes still listed"; failures=$((failures + 1)); }
    expect 0 "round $round: the key's sandbox is readable" -- exec "${acas[@]}" --floor container "${key[@]}" -- cat writers
    got=$(sort <"$out" | tr '\n' ' ')
    want=$(for i in $(seq 1 "$processes"); do echo "writer-$i"; done | sort | tr '\n' ' ')
    if [[ $got != "$want" ]]; then
        echo "FAIL: round $round: lost writes: the sandbox holds '$got', wanted '$want'"
        failures=$((failures + 1))
    else
        echo "ok: round $round: all $processes writes are in the one sandbox"
    fi
    expect 0 "round $round: purge" -- purge "${acas[@]}" --scope race --thread "$thread"
done
[[ $failures -eq 0 ]]
