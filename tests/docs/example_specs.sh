#!/usr/bin/env bash
# Every sample spec under examples/specs passes `maf-sandbox check` against the local backend at
# floor container, and there is one for each kind the project ships.
# Usage: example_specs.sh <maf-sandbox> <examples/specs>
set -u
bin=$1 dir=$2 failures=0 checked=0
for kind in codeact shell; do
    grep -l "\"kind\": \"$kind\"" "$dir"/*.json >/dev/null || { echo "FAIL: no sample spec of kind $kind"; failures=$((failures + 1)); }
done
for spec in "$dir"/*.json; do
    if out=$("$bin" check --spec "$spec" --backend local --floor container 2>&1); then
        echo "ok: $(basename "$spec"): $out"
    else
        echo "FAIL: $(basename "$spec") (exit $?): $out"
        failures=$((failures + 1))
    fi
    checked=$((checked + 1))
done
echo "$checked sample specs checked, $failures failure(s)"
[[ $checked -ge 2 && $failures -eq 0 ]]
