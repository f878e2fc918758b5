#!/usr/bin/env bash
# Errors a person can act on: each message's text and the exit status that goes with it.
# Usage: messages.sh <maf-sandbox> [ENDPOINT CA_FILE TOKEN]  (the second form adds the checks
# against an acas-emulator: a forgotten CA file, and mcp's image default and start-up check)
set -u
bin=$1
out=$(mktemp) err=$(mktemp) failures=0
export MAF_SANDBOX_STATE_DIR=${MAF_SANDBOX_STATE_DIR:-$(mktemp -d)}
trap 'rm -f "$out" "$err"' EXIT
source "$(dirname "$0")/expect.sh"
stderr_lacks() { ! grep -q -- "$1" "$err" || { echo "FAIL: stderr has '$1': $(head -c 400 "$err")"; failures=$((failures + 1)); }; }

# Sizes and durations take suffixes; a mistake is answered with the forms, not a numeric range.
expect 0 "--memory 512M --timeout 90s are taken" -- run --floor container --memory 512M --timeout 90s --max-output 64K -- true
expect 125 "--memory 512X is refused" -- run --floor container --memory 512X -- true
stderr_has "'512X' has an unknown unit; give bytes, or 512K, 512M, 2G (1024-based; also Mi, GiB), 500MB (1000-based)"
stderr_lacks "not in range"
expect 125 "--disk 0 is refused" -- run --floor container --disk 0 -- true
stderr_has "'0' is not above zero"
expect 125 "--timeout 2x is refused" -- run --floor container --timeout 2x -- true
stderr_has "'2x' has an unknown unit; give seconds, or 500ms, 90s, 2m, 1h, 1m30s"
expect 125 "--pids abc is refused in words" -- run --floor container --pids abc -- true
stderr_has "'abc' is not a whole number above zero"
expect 125 "pool set --memory 1Q is refused" -- pool set --size 1 --memory 1Q
stderr_has "'1Q' has an unknown unit"
expect 125 "mcp --timeout 1x is refused" -- mcp --timeout 1x
stderr_has "'1x' has an unknown unit"

# Typos get "did you mean".
expect 125 "a mistyped command" -- rnu -- true
stderr_has "unknown command 'rnu' for 'maf-sandbox'; did you mean 'run'?"
expect 125 "a mistyped subcommand" -- images lst
stderr_has "unknown command 'lst' for 'maf-sandbox images'; did you mean 'list'?"
expect 125 "a mistyped option" -- run --memroy 5 -- true
stderr_has "unknown option '--memroy' for 'maf-sandbox run'; did you mean '--memory'?"
expect 125 "a mistyped mcp option" -- mcp --timout 5
stderr_has "did you mean '--timeout'?"
expect 125 "an option nothing resembles" -- ls --zzzzzzzz
stderr_has "unknown option '--zzzzzzzz' for 'maf-sandbox ls'; see 'maf-sandbox ls --help'"
expect 125 "no command" --
stderr_has "'maf-sandbox' needs a command, one of: bench, check"
stderr_lacks "A subcommand is required"

# -v, --log-level and MAF_SANDBOX_LOG.
expect 125 "an unknown --log-level" -- --log-level loud ls
stderr_has "'loud' is not a log level; use trace, debug, info, warn, error or off"
expect_run 125 "an unknown MAF_SANDBOX_LOG" -- env MAF_SANDBOX_LOG=bogus "$bin" ls
stderr_has "MAF_SANDBOX_LOG: 'bogus' is not a log level"
expect 0 "mcp logs at info by default" -- mcp --backend in-process --floor none </dev/null
stderr_has "info: serving MCP over stdio"
expect 0 "--log-level warn quiets mcp (after the command too)" -- mcp --backend in-process --floor none --log-level warn </dev/null
stderr_lacks "info:"
expect_run 0 "MAF_SANDBOX_LOG=error quiets mcp" -- env MAF_SANDBOX_LOG=error "$bin" mcp --backend in-process --floor none </dev/null
stderr_lacks "info:"
expect 0 "-v is taken after the command" -- ls -v
expect 125 "mcp checks a local image at start" -- mcp --floor container --image nosuch:1 </dev/null
stderr_has "option '--image': 'nosuch:1' is not in the local image store"

if [[ $# -ge 4 ]]; then
    endpoint=$2 ca=$3 token=$4
    export ACAS_SANDBOX_SUBSCRIPTION_ID=sub ACAS_SANDBOX_RESOURCE_GROUP=rg ACAS_SANDBOX_GROUP=grp \
        ACAS_SANDBOX_REGISTRY=reg.local ACAS_SANDBOX_ENDPOINT=$endpoint ACAS_SANDBOX_TOKEN=$token
    # A forgotten CA file: named, with its fix, at once (never retried for 20 s).
    expect 125 "a forgotten CA file" -- ls --backend acas
    stderr_has "TLS certificate was not accepted: self-signed certificate in certificate chain. Not retried"
    stderr_has "trust its CA certificate with --ca-file FILE"
    stderr_lacks "check the endpoint and the network"
    export ACAS_SANDBOX_CA_FILE=$ca
    expect 0 "mcp --backend acas on the emulator starts on its host image" -- mcp --backend acas --floor container </dev/null
    stderr_has "info: serving MCP over stdio"
    expect 125 "mcp checks an ACAS catalogue image at start" -- mcp --backend acas --floor container --image nosuch </dev/null
    stderr_has "option '--image': 'nosuch' is not in the service's prebuilt catalogue, which has"
fi
[[ $failures -eq 0 ]]
