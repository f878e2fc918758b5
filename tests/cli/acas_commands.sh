#!/usr/bin/env bash
# `run`, `exec`, `ls`, `rm`, `purge` and `images` with --backend acas, against a running
# acas-emulator, as a user types them (run through with_emulator.sh):
#   acas_commands.sh MAF_SANDBOX ACAS_EMULATOR ENDPOINT CA_FILE TOKEN
set -u
bin=$1 emulator=$2 endpoint=$3 ca_file=$4 token=$5
state_dir=$(dirname "$ca_file")
failures=0
work=$(mktemp -d /tmp/maf-cli-acas-XXXXXX)
trap 'rm -rf "$work"' EXIT
out=$work/out err=$work/err
acas=(--backend acas --endpoint "$endpoint" --subscription-id sub --resource-group rg
      --sandbox-group grp --registry reg.local --ca-file "$ca_file" --token "$token" --emulator)

source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# run: one shot, through the router; the emulator names its rung, so the user consents to it.
expect 125 "run refuses the emulator's rung under the default microvm floor" -- run "${acas[@]}" -- true
stderr_has "--floor container"
printf 'input bytes\n' >"$work/in.txt"
expect 7 "run passes streams and the exit code through" -- run "${acas[@]}" --floor container \
    --in "$work/in.txt:in.txt" --out result.txt --out-dir "$work" \
    -- sh -c 'tr a-z A-Z < in.txt > result.txt; echo out; echo err >&2; exit 7'
stdout_is "out"
stderr_has "err"
[[ $(cat "$work/result.txt" 2>/dev/null) == "INPUT BYTES" ]] || { echo "FAIL: --out did not land result.txt"; failures=$((failures + 1)); }
expect 0 "run disposed its sandbox" -- ls "${acas[@]}" --label scope=cli
stdout_is ""
expect 125 "local limit flags are refused with acas" -- run "${acas[@]}" --floor container --memory 1000000 -- true
expect 125 "an unknown egress mode is bad input" -- run "${acas[@]}" --floor container --egress open -- true
expect 125 "unrestricted egress is refused: the backend does not enforce it" -- run "${acas[@]}" --floor container --egress unrestricted -- true
stderr_has "SandboxEgressNotEnforced"
# Docker's convention through the guest shell too: 127 not found, 126 not runnable.
expect 125 "run -t is refused before a sandbox exists: ACAS has no terminal" -- run "${acas[@]}" --floor container -t -- true
stderr_has "does not declare the terminal capability"
expect 0 "the refused -t run left no sandbox" -- ls "${acas[@]}" --label scope=cli
[[ -z "$(cat "$out")" ]] || { echo "FAIL: a sandbox is listed after the refused -t: $(cat "$out")"; failures=$((failures + 1)); }
expect 127 "a program the guest does not have exits 127" -- run "${acas[@]}" --floor container -- no-such-program-i27
expect 126 "a file the guest cannot execute exits 126" -- run "${acas[@]}" --floor container -- /etc/passwd

# exec: warm reuse by key, across processes (found again by its labels).
key=(--scope s-cli --thread t-cli)
expect 0 "exec creates the key's sandbox" -- exec "${acas[@]}" --floor container "${key[@]}" -- sh -c 'echo warm > warm.txt'
expect 0 "a second exec reuses it" -- exec "${acas[@]}" --floor container "${key[@]}" -- cat warm.txt
stdout_is "warm"
expect 125 "a changed egress policy on the warm key is a conflict that keeps the original" -- \
    exec "${acas[@]}" --floor container "${key[@]}" --egress allowlist --allow example.com -- true
stderr_has "AcasEgressPolicyConflict"
expect 0 "allowlist egress is served for a fresh key" -- \
    exec "${acas[@]}" --floor container --scope s-cli --thread t-allow --egress allowlist --allow Example.com -- true
expect 0 "ls lists the key's sandbox by label" -- ls "${acas[@]}" --label scope=s-cli --label thread=t-cli --json
id=$(python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(len(v), v[0]["id"] if v else "")' "$out")
[[ ${id%% *} == 1 ]] || { echo "FAIL: ls listed '$id', wanted one sandbox"; failures=$((failures + 1)); }
id=${id#* }
expect 0 "the original survived the conflict" -- exec "${acas[@]}" --floor container "${key[@]}" -- cat warm.txt
stdout_is "warm"
expect 0 "rm deletes it by id" -- rm "${acas[@]}" "$id"
expect 125 "rm of a gone id says so" -- rm "${acas[@]}" "$id"
stderr_has "no sandbox"
expect 0 "purge deletes the conversation's sandboxes by label" -- purge "${acas[@]}" --scope s-cli --thread t-allow
stdout_is "1"
expect 0 "nothing of the conversations is left" -- ls "${acas[@]}" --label scope=s-cli
stdout_is ""
expect 125 "gc stays local" -- gc --backend acas

# images: the catalogue, and the README's import_disk_image script.
expect 0 "images list shows the prebuilt catalogue" -- images list "${acas[@]}"
stdout_has "^host .*prebuilt"
mkdir -p "$work/rootfs/etc" && echo tool >"$work/rootfs/etc/hostname"
tar -C "$work/rootfs" -cf "$work/tool.tar" .
"$emulator" images add "$work/tool.tar" --ref reg.local/tool:1.0 --state-dir "$state_dir" 2>/dev/null ||
    { echo "FAIL: acas-emulator images add"; failures=$((failures + 1)); }
expect 0 "images import builds a disk image from repo:tag and prints its id" -- images import "${acas[@]}" tool:1.0
stdout_has "^imported: "
image_id=$(sed -n 's/^imported: //p' "$out")
expect 0 "a second import is idempotent" -- images import "${acas[@]}" tool:1.0
stdout_is "already imported: $image_id"
expect 0 "images list --json shows it Ready under its qualified reference" -- images list "${acas[@]}" --json
python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); i=[x for x in v["imported"] if x["id"]==sys.argv[2]]; sys.exit(0 if i and i[0]["base"]=="reg.local/tool:1.0" and i[0]["state"]=="Ready" and "host" in v["prebuilt"] else 1)' "$out" "$image_id" ||
    { echo "FAIL: images list --json: $(head -c 400 "$out")"; failures=$((failures + 1)); }
expect 125 "a bare catalogue name has nothing to import" -- images import "${acas[@]}" ubuntu
expect 125 "a reference the registry does not have fails the import" -- images import "${acas[@]}" missing:0
stderr_has "missing:0"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
