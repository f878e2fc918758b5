#!/usr/bin/env bash
# with_emulator.sh ACAS_EMULATOR CMD ARGS...: starts acas-emulator on a free loopback port with a
# self-signed certificate, then runs CMD with @ENDPOINT@, @CA_FILE@ and @TOKEN@ in its arguments
# replaced; stops the emulator afterwards and exits with CMD's status. MAF_TEST_EMULATOR_ARGS, when
# set, adds options to `acas-emulator serve` (word-split).
set -euo pipefail
emulator=$1
shift
work=$(mktemp -d /tmp/maf-with-emulator-XXXXXX)
pid=""
cleanup() {
    [[ -n $pid ]] && { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    rm -rf "$work"
}
trap cleanup EXIT
token=test-token
mkfifo "$work/out"
"$emulator" serve --listen 127.0.0.1:0 --state-dir "$work/state" --self-signed --token "$token" ${MAF_TEST_EMULATOR_ARGS:-} \
    >"$work/out" 2>"$work/log" &
pid=$!
exec 3<"$work/out"
read -r -t 60 first <&3 || { echo "the emulator did not start:"; cat "$work/log"; exit 1; }
endpoint=${first#listening on }
args=()
for arg in "$@"; do
    arg=${arg//@ENDPOINT@/$endpoint}
    arg=${arg//@CA_FILE@/$work/state/ca.pem}
    args+=("${arg//@TOKEN@/$token}")
done
"${args[@]}"
