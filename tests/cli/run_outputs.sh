#!/usr/bin/env bash
# `run --in/--out/--out-dir` never loses a file silently (issue 27 item 3): an output that cannot
# land fails the run (125) naming the host path and the reason, and leaves no partial file; what
# cannot work is refused before the command runs.
#   run_outputs.sh MAF_SANDBOX
# Needs root to mount its own small tmpfs file systems (read-only, and full) in its own temporary
# directory; it unmounts them on exit. Without that it exits 77 (skipped).
set -u
bin=$1
full_cli=$(dirname "$bin")/maf-sandbox-cli
failures=0
work=$(mktemp -d /tmp/maf-cli-outputs-XXXXXX)
export MAF_SANDBOX_STATE_DIR=$work/state
mounts=()
cleanup() {
    for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
out=$work/out err=$work/err

source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

mount_tmpfs() {  # mount_tmpfs DIR OPTIONS
    mkdir -p "$1"
    mount -t tmpfs -o "$2" maf-i27-test "$1" || { echo "SKIP: cannot mount a tmpfs (needs root)"; exit 77; }
    mounts+=("$1")
}
# Nothing but the named files in DIR: no partial file, no staged sibling left behind.
dir_holds() {  # dir_holds DIR [NAME...]
    local dir=$1; shift
    local got want
    got=$(cd "$dir" && ls -A | sort | tr '\n' ' ')
    want=$(printf '%s\n' "$@" | sed '/^$/d' | sort | tr '\n' ' ')
    [[ "$got" == "$want" ]] || { echo "FAIL: $dir holds '$got', wanted '$want'"; failures=$((failures + 1)); }
}

run=(run --backend local --floor container)
big='head -c 1048576 /dev/zero | tr "\0" x > big.bin; echo ran'

mkdir -p "$work/ok"
expect_run 0 "control: an output lands whole in a writable --out-dir" -- "$full_cli" "${run[@]}" \
    --out big.bin --out-dir "$work/ok" -- sh -c "$big"
stdout_is "ran"
[[ $(stat -c %s "$work/ok/big.bin" 2>/dev/null) == 1048576 ]] || { echo "FAIL: big.bin did not land whole"; failures=$((failures + 1)); }
dir_holds "$work/ok" big.bin

# A missing --out-dir: refused before the command runs, and not created.
expect_run 125 "--out into a missing --out-dir fails before the command runs" -- "$full_cli" "${run[@]}" \
    --out big.bin --out-dir "$work/missing" -- sh -c "$big"
stderr_has "$work/missing"
stderr_has "No such file or directory"
stdout_is ""
[[ ! -e "$work/missing" ]] || { echo "FAIL: the missing --out-dir was created"; failures=$((failures + 1)); }

# A read-only file system.
mount_tmpfs "$work/ro" ro,size=1m
expect_run 125 "--out into a read-only --out-dir fails before the command runs" -- "$full_cli" "${run[@]}" \
    --out big.bin --out-dir "$work/ro" -- sh -c "$big"
stderr_has "$work/ro"
stderr_has "Read-only file system"
stdout_is ""
dir_holds "$work/ro"

# A file system with room for 256 KiB of the 1 MiB output, holding an older big.bin.
mount_tmpfs "$work/full" size=256k
printf 'old' >"$work/full/big.bin"
expect_run 125 "--out onto a full file system fails naming the host path and the reason" -- \
    "$full_cli" "${run[@]}" --out big.bin --out-dir "$work/full" -- sh -c "$big"
stdout_is "ran"
stderr_has "$work/full/big.bin"
stderr_has "No space left on device"
dir_holds "$work/full" big.bin
[[ $(cat "$work/full/big.bin") == old ]] || { echo "FAIL: the older big.bin was not kept whole: $(stat -c %s "$work/full/big.bin") bytes"; failures=$((failures + 1)); }
rm -f "$work/full/big.bin"
expect_run 125 "a full file system fails the run even when the program failed too" -- \
    "$full_cli" "${run[@]}" --out big.bin --out-dir "$work/full" -- sh -c "$big; exit 3"
stderr_has "No space left on device"
dir_holds "$work/full"

# --in of a directory is refused (it used to copy in an empty file); the command never runs.
mkdir -p "$work/tree/sub"
echo leaf >"$work/tree/sub/leaf.txt"
expect_run 125 "--in of a directory is refused, saying how to pass a tree" -- "$full_cli" "${run[@]}" \
    --in "$work/tree" -- echo ran
stderr_has "is a directory"
stderr_has "tar"
stdout_is ""
expect_run 125 "--in of a missing host file is refused" -- "$full_cli" "${run[@]}" --in "$work/nothing.txt" -- echo ran
stderr_has "$work/nothing.txt"
stdout_is ""

# Outputs whose names collide are refused before the command runs.
expect_run 125 "two --out with the same base name are refused" -- "$full_cli" "${run[@]}" \
    --out a/r.txt --out b/r.txt --out-dir "$work/ok" -- echo ran
stderr_has "would land on one file"
stdout_is ""
expect_run 125 "two --out whose base names differ only in case are refused" -- "$full_cli" "${run[@]}" \
    --out R.txt --out r.txt --out-dir "$work/ok" -- echo ran
stderr_has "letter case"
expect_run 125 "the same --out twice is refused" -- "$full_cli" "${run[@]}" \
    --out r.txt --out r.txt --out-dir "$work/ok" -- echo ran
stderr_has "given twice"
expect_run 125 "an --out with no base name is refused" -- "$full_cli" "${run[@]}" \
    --out out/ --out-dir "$work/ok" -- echo ran
stderr_has "names no file"
expect_run 0 "distinct outputs from different directories land side by side" -- "$full_cli" "${run[@]}" \
    --out a/one.txt --out b/two.txt --out-dir "$work/ok" \
    -- sh -c 'mkdir a b; echo 1 > a/one.txt; echo 2 > b/two.txt'
[[ $(cat "$work/ok/one.txt")$(cat "$work/ok/two.txt") == 12 ]] || { echo "FAIL: one.txt and two.txt did not land"; failures=$((failures + 1)); }

# Host paths holding ':'. HOST:GUEST splits at the last ':'; a trailing ':' takes it whole.
mkdir -p "$work/in:dir" "$work/out:dir"
echo colon >"$work/in:dir/a:b.txt"
expect_run 0 "--in HOST: with colons in the host path lands under its base name" -- "$full_cli" "${run[@]}" \
    --in "$work/in:dir/a:b.txt:" -- cat a:b.txt
stdout_is "colon"
expect_run 0 "--in HOST:GUEST with colons in the host path lands at the guest path" -- "$full_cli" "${run[@]}" \
    --in "$work/in:dir/a:b.txt:copied.txt" -- cat copied.txt
stdout_is "colon"
expect_run 125 "a colon split where a host path was meant says how to take it whole" -- "$full_cli" "${run[@]}" \
    --in "$work/in:dir/a:b.txt" -- true
stderr_has "end the value with ':'"
expect_run 0 "an --out-dir with a colon receives the output" -- "$full_cli" "${run[@]}" \
    --out r.txt --out-dir "$work/out:dir" -- sh -c 'echo here > r.txt'
[[ $(cat "$work/out:dir/r.txt" 2>/dev/null) == here ]] || { echo "FAIL: r.txt did not land in out:dir"; failures=$((failures + 1)); }

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
