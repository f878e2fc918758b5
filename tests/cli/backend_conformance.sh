#!/usr/bin/env bash
# `maf-sandbox conformance` on a real backend, as CI runs it:
#   backend_conformance.sh local MAF_SANDBOX
#   backend_conformance.sh acas MAF_SANDBOX ACAS_EMULATOR
# Passes when the command exits 0 and its last line reports no failed probe.
set -euo pipefail
backend=$1
bin=$2
work=$(mktemp -d /tmp/maf-conformance-XXXXXX)
emulator_pid=""
cleanup() {
    if [[ -n $emulator_pid ]]; then
        kill -TERM "$emulator_pid" 2>/dev/null || true
        wait "$emulator_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
export MAF_SANDBOX_STATE_DIR="$work/state"

case "$backend" in
local)
    "$bin" conformance --backend local --floor container | tee "$work/out"
    ;;
acas)
    emulator=$3
    token=test-token
    mkfifo "$work/emulator.out"
    "$emulator" serve --listen 127.0.0.1:0 --state-dir "$work/emulator" --self-signed \
        --token "$token" >"$work/emulator.out" 2>"$work/emulator.log" &
    emulator_pid=$!
    exec 3<"$work/emulator.out"
    read -r -t 60 first <&3 || { echo "the emulator did not start:"; cat "$work/emulator.log"; exit 1; }
    endpoint=${first#listening on }
    "$bin" conformance --backend acas --emulator --floor container --endpoint "$endpoint" \
        --subscription-id sub --resource-group rg --sandbox-group group --registry reg.local \
        --ca-file "$work/emulator/ca.pem" --token "$token" | tee "$work/out"
    ;;
esac
last=$(tail -n 1 "$work/out")
[[ $last =~ ^[0-9]+\ passed,\ 0\ failed ]] || { echo "unexpected summary: $last"; exit 1; }
for suite in FILES_OUT FILES_IN EXEC FILES_DELETE; do
    grep -q "^$suite .* PASS" "$work/out" || { echo "no $suite probe passed"; exit 1; }
done
