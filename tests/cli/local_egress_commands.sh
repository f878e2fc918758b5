#!/usr/bin/env bash
# `run` and `exec` with --egress/--allow (and other repeatable options) before `--`, and
# `egress-log`, against the local backend as a user types them:
#   local_egress_commands.sh MAF_SANDBOX
# The guest asks the proxy for a host that is not allowed: the proxy refuses it before any name
# is resolved, so nothing leaves this machine.
set -u
bin=$1
failures=0
work=$(mktemp -d /tmp/maf-cli-egress-XXXXXX)
export MAF_SANDBOX_STATE_DIR=$work/state
scope=cli-egress-$$
cleanup() {
    "$bin" purge --scope "$scope" --thread t >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
out=$work/out err=$work/err

source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

printf 'one\n' >"$work/a.txt"
printf 'two\n' >"$work/b.txt"
expect 0 "repeated --in before -- keeps the command's own flags" -- run --floor container \
    --in "$work/a.txt:a.txt" --in "$work/b.txt:b.txt" -- sh -c 'cat a.txt b.txt'
stdout_has "one"
stdout_has "two"

expect 0 "run with repeated --allow gives the guest the proxy in every spelling" -- run \
    --floor container --egress allowlist --allow allowed.invalid --allow other.invalid \
    -- sh -c 'env | sort'
for name in http_proxy https_proxy HTTP_PROXY HTTPS_PROXY; do
    stdout_has "^$name=http://127.0.0.1:3128$"
done

expect 0 "closed egress gives the guest no proxy" -- run --floor container -- sh -c 'env'
stdout_lacks "proxy"

expect 125 "an unknown egress mode is bad input" -- run --floor container --egress open -- true
stderr_has "egress"

keyed=(--floor container --scope "$scope" --thread t --egress allowlist --allow allowed.invalid)
request='exec 3<>/dev/tcp/127.0.0.1/3128 && printf "GET http://denied.invalid/ HTTP/1.1\r\nHost: denied.invalid\r\n\r\n" >&3 && head -c 12 <&3'
expect 0 "a denied host gets 403 from the proxy" -- exec "${keyed[@]}" -- bash -c "$request"
stdout_has "HTTP/1.1 403"

expect 125 "a different allowlist for the same key is a policy conflict" -- exec --floor container \
    --scope "$scope" --thread t --egress allowlist --allow elsewhere.invalid -- true
stderr_has "EgressPolicyConflict"

expect 0 "ls finds the sandbox" -- ls --json
id=$(grep -o '"id":"[^"]*"' "$out" | head -1 | cut -d'"' -f4)
expect 0 "egress-log lists the refusal with its reason" -- egress-log "$id" --json
stdout_has '"host":"denied.invalid"'
stdout_has '"allowed":false'
stdout_has 'not in allowlist'

expect 125 "egress-log of an unknown id is bad input" -- egress-log no-such-sandbox
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all passed"
