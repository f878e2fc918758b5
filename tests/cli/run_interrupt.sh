#!/usr/bin/env bash
# SIGINT and SIGTERM during a one-shot `run` dispose of its sandbox before the CLI exits, which
# exits 130 or 143 as a shell reports a program those signals ended. Both front ends: the full CLI
# (a run it creates a sandbox for) and the lean one (a run it serves from the shared pool). After
# each, `ls`, the registry and the process table hold nothing of the run.
#   run_interrupt.sh MAF_SANDBOX
set -u
# Job control: background jobs of a script would otherwise start with SIGINT ignored.
set -m
bin=$1
full_cli=$(dirname "$bin")/maf-sandbox-cli
failures=0
work=$(mktemp -d /tmp/maf-cli-interrupt-XXXXXX)
export MAF_SANDBOX_STATE_DIR=$work/state
mkdir -p "$work/alone"
cp "$bin" "$work/alone/maf-sandbox"
alone=$work/alone/maf-sandbox
cleanup() {
    "$bin" pool drain >/dev/null 2>&1
    for id in $("$bin" ls --json 2>/dev/null | python3 -c 'import json,sys; [print(s["id"]) for s in json.load(sys.stdin)]' 2>/dev/null); do
        "$bin" rm "$id" >/dev/null 2>&1
    done
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The run's sandbox: not a pooled one (a pool's are labelled maf-pool).
run_sandbox_id() {
    "$bin" ls --json | python3 -c 'import json,sys; [print(s["id"]) for s in json.load(sys.stdin) if "maf-pool" not in s["labels"]]'
}
# Processes in the sandbox's cgroups (its supervisor, the guest's): none once it is disposed.
processes_of() { grep -ls "maf-sbx-$1" /proc/[0-9]*/cgroup 2>/dev/null | wc -l; }

# interrupt WHAT SIGNAL WANT_STATUS -- COMMAND...: starts COMMAND, waits until its program
# runs, signals the CLI, then checks its status and that nothing of the run is left.
interrupt() {
    local what=$1 signal=$2 want=$3
    shift 4
    local outfile=$work/out.$signal errfile=$work/err.$signal
    "$@" >"$outfile" 2>"$errfile" &
    local pid=$!
    local deadline=$((SECONDS + 60))
    # Output comes at the end of an exec, so the program's own process says it is running.
    until pgrep -f "^sleep $marker\$" >/dev/null; do
        if ((SECONDS > deadline)) || ! kill -0 $pid 2>/dev/null; then
            fail "$what: the program never started: $(cat "$errfile")"
            kill -KILL $pid 2>/dev/null
            wait $pid 2>/dev/null
            return
        fi
        sleep 0.05
    done
    local id
    id=$(run_sandbox_id)
    [[ -n "$id" && $(processes_of "$id") -gt 0 ]] || fail "$what: ls does not show the running sandbox '$id'"
    kill -s "$signal" $pid
    wait $pid
    local status=$?
    if [[ $status -ne $want ]]; then
        fail "$what: exit $status, wanted $want; stderr: $(head -c 400 "$errfile")"
    else
        echo "ok: $what exits $want"
    fi
    # Checked at once, not polled: the disposal happened before the CLI exited.
    [[ -z "$(run_sandbox_id)" ]] || fail "$what: ls still lists the run's sandbox"
    [[ ! -e "$work/state/sandboxes/$id" ]] || fail "$what: the registry still holds sandbox $id"
    [[ $(processes_of "$id") -eq 0 ]] || fail "$what: processes of sandbox $id are alive"
    ! pgrep -f "^sleep $marker\$" >/dev/null || fail "$what: the program is still running"
}

run=(run --backend local --floor container --timeout 300)
marker=600.$$
program=(sh -c "exec sleep $marker")

interrupt "full CLI run, SIGINT" INT 130 -- "$full_cli" "${run[@]}" -- "${program[@]}"
interrupt "full CLI run, SIGTERM" TERM 143 -- "$full_cli" "${run[@]}" -- "${program[@]}"

# The lean front end serves a run from the shared pool itself (the copy alone has no full CLI).
"$bin" pool set --size 1 >/dev/null || fail "pool set"
interrupt "lean pooled run, SIGINT" INT 130 -- "$alone" "${run[@]}" -- "${program[@]}"
# The copy alone cannot start the pool's filler: refill it from here.
"$bin" pool fill >/dev/null || fail "pool fill"
interrupt "lean pooled run, SIGTERM" TERM 143 -- "$alone" "${run[@]}" -- "${program[@]}"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
