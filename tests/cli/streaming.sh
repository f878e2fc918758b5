#!/usr/bin/env bash
# `run` and `exec` print output as the program writes it, and forward stdin that is not a
# terminal, on both front ends:
#   streaming.sh MAF_SANDBOX
set -u
bin=$1
failures=0
work=$(mktemp -d /tmp/maf-cli-stream-XXXXXX)
export MAF_SANDBOX_STATE_DIR=$work/state
scope=cli-stream-$$
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

run=(run --backend local --floor container)
warm=(exec --backend local --floor container --scope "$scope" --thread t)
ticker='for i in $(seq 1 30); do echo line$i; sleep 0.1; done'

# Each line as the reader got it, prefixed with the reader's clock in milliseconds.
stamp_lines() { while IFS= read -r line; do echo "$(( ${EPOCHREALTIME/./} / 1000 )) $line"; done; }

# spread WHAT FILE: 30 lines arrived, and the first a good while before the last (streamed, they
# come over the program's 3 s; bunched, all within a moment). Generous: a bound, not a speed.
spread() {
    local what=$1 file=$2
    local lines first last
    lines=$(wc -l <"$file")
    first=$(head -n 1 "$file" | cut -d' ' -f1)
    last=$(tail -n 1 "$file" | cut -d' ' -f1)
    if [[ $lines -ne 30 || "$(tail -n 1 "$file" | cut -d' ' -f2)" != line30 ]]; then
        echo "FAIL: $what: $lines lines: $(head -c 300 "$file")"; failures=$((failures + 1))
    elif (( last - first < 1500 )); then
        echo "FAIL: $what: the lines arrived within $((last - first)) ms of each other"; failures=$((failures + 1))
    else
        echo "ok: $what ($((last - first)) ms from the first line to the last)"
    fi
}

"$bin" "${run[@]}" -- sh -c "$ticker" </dev/null 2>"$err" | stamp_lines >"$work/run.times"
spread "run prints each line as the program writes it" "$work/run.times"

expect_run 0 "the first exec of a key creates its sandbox" -- "$bin" "${warm[@]}" -- true
"$bin" "${warm[@]}" -- sh -c "$ticker" </dev/null 2>"$err" | stamp_lines >"$work/exec.times"
spread "a warm exec (served by the lean front end) prints each line as it comes" "$work/exec.times"

expect_run 0 "piped stdin reaches the program of a run" -- bash -c "echo x | '$bin' ${run[*]} -- cat"
stdout_is "x"
# The same through the lean front end serving a pooled run itself (the copy alone has no full
# CLI to hand over to).
expect_run 0 "the shared pool is set for the lean front end's run" -- "$bin" pool set --size 1
expect_run 0 "piped stdin reaches the program of a run the lean front end serves" -- bash -c "echo x | '$alone' ${run[*]} -- cat"
stdout_is "x"
expect_run 0 "the pool is drained" -- "$bin" pool drain

# README's "Using it" example, as it is written there: three lines a second apart, each printed
# when it is written.
readme_ticker='for i in 1 2 3; do echo $i; sleep 1; done'
grep -qF -- "-- sh -c '$readme_ticker'" "$(dirname "${BASH_SOURCE[0]}")/../../README.md" ||
    { echo "FAIL: README's streaming example is not the one tested here"; failures=$((failures + 1)); }
"$bin" "${run[@]}" -- sh -c "$readme_ticker" </dev/null 2>"$err" | stamp_lines >"$work/readme.times"
if [[ "$(cut -d' ' -f2 "$work/readme.times" | tr '\n' ' ')" == "1 2 3 " &&
    $(( $(tail -n 1 "$work/readme.times" | cut -d' ' -f1) - $(head -n 1 "$work/readme.times" | cut -d' ' -f1) )) -ge 1500 ]]; then
    echo "ok: README's streaming example prints its lines as they come"
else
    echo "FAIL: README's streaming example: $(cat "$work/readme.times")"; failures=$((failures + 1))
fi

expect_run 0 "piped stdin reaches the program of a warm exec" -- bash -c "printf 'a\0b' | '$bin' ${warm[*]} -- od -An -c"
stdout_has "a  *\\\\0  *b"
expect_run 0 "stdin redirected from a file is forwarded too" -- bash -c "printf 'from file' >'$work/in'; '$bin' ${run[*]} -- cat <'$work/in'"
stdout_is "from file"
expect_run 3 "the exit status stays the program's when stdin is piped" -- bash -c "echo x | '$bin' ${warm[*]} -- sh -c 'cat >/dev/null; exit 3'"
expect_run 125 "a timeout keeps what was printed before it" -- "$bin" "${warm[@]}" --timeout 1 -- sh -c 'echo before; sleep 30'
stdout_is "before"
stderr_has "timeout"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
