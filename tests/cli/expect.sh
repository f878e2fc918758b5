# Assertions shared by the CLI scripts (sourced). The script sets `bin` (the command under test),
# `out` and `err` (files for the last run's streams) and `failures=0`, and ends with
# `[[ $failures -eq 0 ]]`.

# expect_run STATUS DESCRIPTION -- PROGRAM ARGS...: runs PROGRAM, checks its exit status.
expect_run() {
    local want=$1 what=$2
    shift 3
    "$@" >"$out" 2>"$err"
    local got=$?
    if [[ $got -ne $want ]]; then
        echo "FAIL: $what: exit $got, wanted $want"; echo "  stdout: $(head -c 600 "$out")"; echo "  stderr: $(head -c 600 "$err")"
        failures=$((failures + 1))
    else
        echo "ok: $what"
    fi
}
# expect STATUS DESCRIPTION -- ARGS...: the same for "$bin" ARGS...
expect() {
    local want=$1 what=$2
    shift 3
    expect_run "$want" "$what" -- "$bin" "$@"
}
stdout_is() { [[ "$(cat "$out")" == "$1" ]] || { echo "FAIL: stdout is '$(head -c 400 "$out")', wanted '$1'"; failures=$((failures + 1)); }; }
stdout_has() { grep -q -- "$1" "$out" || { echo "FAIL: stdout lacks '$1': $(head -c 400 "$out")"; failures=$((failures + 1)); }; }
stdout_lacks() { ! grep -q -- "$1" "$out" || { echo "FAIL: stdout has '$1': $(head -c 400 "$out")"; failures=$((failures + 1)); }; }
stderr_has() { grep -q -- "$1" "$err" || { echo "FAIL: stderr lacks '$1': $(head -c 400 "$err")"; failures=$((failures + 1)); }; }
