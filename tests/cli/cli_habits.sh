#!/usr/bin/env bash
# The habits Docker users bring, on both front ends: `-e KEY=VALUE` and `--env-file` reach the
# program; `exec --id ID` runs in the sandbox `ls` names; `cp` copies one file in and out of a live
# sandbox byte for byte, with clear errors for what it cannot do.
#   cli_habits.sh MAF_SANDBOX
# A copy of the lean front end alone in an empty directory has no full CLI to hand over to, so
# whatever that copy completes, it served itself.
set -u
bin=$1
full_cli=$(dirname "$bin")/maf-sandbox-cli
failures=0
work=$(mktemp -d /tmp/maf-cli-habits-XXXXXX)
export MAF_SANDBOX_STATE_DIR=$work/state
scope=cli-habits-$$
mkdir -p "$work/alone"
cp "$bin" "$work/alone/maf-sandbox"
alone=$work/alone/maf-sandbox
mounts=()
cleanup() {
    for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
    "$bin" pool drain >/dev/null 2>&1
    "$bin" purge --scope "$scope" --thread t >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
out=$work/out err=$work/err

source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

warm=(exec --backend local --floor container --scope "$scope" --thread t)
run=(run --backend local --floor container)

# --- -e and --env-file --------------------------------------------------------------------------
cat >"$work/app.env" <<'EOF'
# a comment, then a blank line

GREETING=from the file
  # an indented comment
QUOTED="kept as written"
EMPTY=
OVERRIDDEN=file
EOF
printenv_all='printf "%s|%s|%s|%s|%s|%s\n" "$GREETING" "$QUOTED" "${EMPTY-unset}" "$OVERRIDDEN" "$FLAG" "$FROM_HOST"'
want='from the file|"kept as written"||flag|a=b c|host value'
export FROM_HOST='host value'

expect_run 0 "full CLI run: -e and --env-file reach the program, -e wins" -- "$full_cli" "${run[@]}" \
    --env-file "$work/app.env" -e OVERRIDDEN=flag -e 'FLAG=a=b c' -e FROM_HOST -- sh -c "$printenv_all"
stdout_is "$want"
expect_run 0 "full CLI exec (creates the key's sandbox): the same environment" -- "$full_cli" "${warm[@]}" \
    --env-file "$work/app.env" -e OVERRIDDEN=flag --env 'FLAG=a=b c' -e FROM_HOST -- sh -c "$printenv_all"
stdout_is "$want"
expect_run 0 "lean warm exec, served alone: the same environment" -- "$alone" "${warm[@]}" \
    --env-file "$work/app.env" -e OVERRIDDEN=flag --env 'FLAG=a=b c' -e FROM_HOST -- sh -c "$printenv_all"
stdout_is "$want"
expect_run 0 "the environment is the exec's own: the next exec does not see it" -- "$alone" "${warm[@]}" \
    -- sh -c 'echo "${GREETING-unset}"'
stdout_is "unset"

printf 'GOOD=1\nthis line is wrong\n' >"$work/bad.env"
expect_run 125 "a bad --env-file line is an error naming the file and the line" -- "$bin" "${run[@]}" \
    --env-file "$work/bad.env" -- echo ran
stderr_has "$work/bad.env"
stderr_has "line 2"
stderr_has "this line is wrong"
stdout_is ""
expect_run 125 "the lean front end hands a bad --env-file to the full CLI's message" -- "$bin" "${warm[@]}" \
    --env-file "$work/bad.env" -- echo ran
stderr_has "line 2"
expect_run 125 "a missing --env-file is an error naming it" -- "$bin" "${warm[@]}" \
    --env-file "$work/none.env" -- echo ran
stderr_has "$work/none.env"
expect_run 125 "-e with a malformed name is refused" -- "$bin" "${warm[@]}" -e '1X=2' -- echo ran
stderr_has "not a variable name"
unset NOT_SET_ANYWHERE
expect_run 125 "-e KEY of an unset variable is refused" -- "$bin" "${warm[@]}" -e NOT_SET_ANYWHERE -- echo ran
stderr_has "NOT_SET_ANYWHERE"

expect_run 0 "pool set builds the pool" -- "$bin" pool set --size 1
expect_run 0 "lean pooled run, served alone: -e reaches the program" -- "$alone" "${run[@]}" \
    -e 'FLAG=pooled' -- sh -c 'echo "$FLAG"'
stdout_is "pooled"
"$bin" pool drain >/dev/null 2>&1

# --- exec --id ----------------------------------------------------------------------------------
id=$("$bin" ls --json --label "scope=$scope" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
[[ -n "$id" ]] || { echo "FAIL: ls names no sandbox for the key"; failures=$((failures + 1)); }
expect_run 0 "exec --id runs in the sandbox ls names" -- "$bin" exec --floor container --id "$id" \
    -- sh -c 'echo by-id > /tmp/by-id; echo ok'
stdout_is "ok"
expect_run 0 "the key's exec sees what exec --id left" -- "$bin" "${warm[@]}" -- cat /tmp/by-id
stdout_is "by-id"
expect_run 3 "exec --id passes -e and the exit status through" -- "$bin" exec --floor container --id "$id" \
    -e CODE=3 -- sh -c 'exit $CODE'
expect_run 125 "exec --id of an unknown id says how to list them" -- "$bin" exec --floor container \
    --id 0123456789abcdef0123 -- true
stderr_has "no live local sandbox"
stderr_has "maf-sandbox ls"
expect_run 125 "exec --id with --scope is refused" -- "$bin" exec --floor container --id "$id" \
    --scope "$scope" -- true
expect_run 125 "exec with neither --id nor a key says what it needs" -- "$bin" exec --floor container -- true
stderr_has "--id"

# --- cp -----------------------------------------------------------------------------------------
# 32 MiB of random bytes with NUL runs in the middle and at both ends.
python3 - "$work/big.bin" <<'EOF'
import os, sys
data = b"\0" * 4096 + os.urandom(16 << 20) + b"\0" * 65536 + os.urandom((16 << 20) - 4096 - 65536 - 4096) + b"\0" * 4096
assert len(data) == 32 << 20
open(sys.argv[1], "wb").write(data)
EOF
sum_of() { sha256sum "$1" | cut -d' ' -f1; }
expect_run 0 "cp a 32 MiB file with NUL bytes into the sandbox" -- "$bin" cp "$work/big.bin" "$id:/tmp/big.bin"
expect_run 0 "the guest sees the same bytes" -- "$bin" "${warm[@]}" -- sh -c 'sha256sum /tmp/big.bin | cut -d" " -f1'
stdout_is "$(sum_of "$work/big.bin")"
mkdir -p "$work/back"
expect_run 0 "cp it back out into a host directory" -- "$bin" cp "$id:/tmp/big.bin" "$work/back"
cmp -s "$work/big.bin" "$work/back/big.bin" || { echo "FAIL: the copy out is not byte-exact"; failures=$((failures + 1)); }
expect_run 0 "cp out to a host file name" -- "$bin" cp "$id:/tmp/big.bin" "$work/back/renamed.bin"
cmp -s "$work/big.bin" "$work/back/renamed.bin" || { echo "FAIL: the renamed copy is not byte-exact"; failures=$((failures + 1)); }
printf 'small\n' >"$work/small.txt"
expect_run 0 "cp into the working directory with a relative path" -- "$bin" cp "$work/small.txt" "$id:."
expect_run 0 "the file is in exec's working directory" -- "$bin" "${warm[@]}" -- cat small.txt
stdout_is "small"
expect_run 0 "cp into an existing guest directory keeps the base name" -- "$bin" cp "$work/small.txt" "$id:/tmp"
expect_run 0 "it landed as /tmp/small.txt" -- "$bin" "${warm[@]}" -- cat /tmp/small.txt
stdout_is "small"

expect_run 125 "cp of a missing host file names it" -- "$bin" cp "$work/nothing.txt" "$id:/tmp/x"
stderr_has "$work/nothing.txt"
stderr_has "No such file"
expect_run 125 "cp of a missing guest file names it" -- "$bin" cp "$id:/tmp/nothing.txt" "$work/back"
stderr_has "/tmp/nothing.txt"
[[ ! -e "$work/back/nothing.txt" ]] || { echo "FAIL: a missing source left a file"; failures=$((failures + 1)); }
mkdir -p "$work/tree"
expect_run 125 "cp of a host directory is refused, saying how to copy a tree" -- "$bin" cp "$work/tree" "$id:/tmp"
stderr_has "is a directory"
stderr_has "tar"
expect_run 125 "cp of a guest directory is refused, saying how to copy a tree" -- "$bin" cp "$id:/tmp" "$work/back"
stderr_has "is a directory"
expect_run 125 "cp into a missing host directory is refused, nothing created" -- "$bin" cp "$id:/tmp/small.txt" "$work/missing/x.txt"
stderr_has "$work/missing"
stderr_has "create it first"
[[ ! -e "$work/missing" ]] || { echo "FAIL: the missing host directory was created"; failures=$((failures + 1)); }
if mkdir -p "$work/ro" && mount -t tmpfs -o ro,size=1m maf-cli-habits "$work/ro" 2>/dev/null; then
    mounts+=("$work/ro")
    expect_run 125 "cp into a read-only host directory is refused" -- "$bin" cp "$id:/tmp/small.txt" "$work/ro"
    stderr_has "Read-only file system"
fi
if mkdir -p "$work/full" && mount -t tmpfs -o size=1m maf-cli-habits "$work/full" 2>/dev/null; then
    mounts+=("$work/full")
    expect_run 125 "cp onto a full host file system fails naming the file, none left" -- "$bin" cp "$id:/tmp/big.bin" "$work/full"
    stderr_has "$work/full/big.bin"
    stderr_has "No space left on device"
    [[ -z "$(ls -A "$work/full")" ]] || { echo "FAIL: a partial file was left: $(ls -A "$work/full")"; failures=$((failures + 1)); }
fi
expect_run 125 "cp with no sandbox side says how to name one" -- "$bin" cp "$work/small.txt" "$work/back"
stderr_has "ID:PATH"
expect_run 125 "cp through ACAS is refused, saying how files move there" -- "$bin" cp --backend acas "$work/small.txt" 0123456789abcdef0123:/tmp/x
stderr_has "run --in"
expect_run 125 "cp to an unknown sandbox says how to list them" -- "$bin" cp "$work/small.txt" 0123456789abcdef0123:/tmp/x
stderr_has "maf-sandbox ls"
expect_run 0 "a guest link to a file" -- "$bin" "${warm[@]}" -- ln -s /etc/hostname /tmp/link
expect_run 125 "cp out of a guest link is refused" -- "$bin" cp "$id:/tmp/link" "$work/back"
[[ ! -e "$work/back/link" ]] || { echo "FAIL: a link was copied out"; failures=$((failures + 1)); }

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
