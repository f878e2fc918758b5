#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build for a bounded time, starting from the seed corpus in
# fuzz/corpus/<target> (read only) and the inputs earlier runs kept in <build>/corpus/<target>.
# A crash, a broken property, a leak or a timeout fails the run; the input that caused it is saved
# as <build>/artifacts/<target>-crash-<sha1> and the command that reproduces it is printed.
#   usage: fuzz/run.sh <build-dir> [seconds-per-target] [target...]
set -euo pipefail

build=${1:?usage: fuzz/run.sh <build-dir> [seconds-per-target] [target...]}
seconds=${2:-15}
shift $(($# >= 2 ? 2 : 1))
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(spec_json guest_paths labels exec_call acas_wire mcp_jsonrpc emulator_routing id_ranges staged_names exec_frames)
fi

mkdir -p "$build/artifacts"
failed=()
for target in "${targets[@]}"; do
  binary="$build/bin/${target}_fuzz"
  scratch="$build/corpus/$target"
  mkdir -p "$scratch"
  dict=()
  [[ -f "$here/dict/$target.dict" ]] && dict=(-dict="$here/dict/$target.dict")
  log="$build/artifacts/$target.log"
  if "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$target-" "${dict[@]}" "$scratch" "$here/corpus/$target" \
      >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(awk -v r="${runs:-0}" -v s="$seconds" 'BEGIN { printf "%d", r / s }')
    echo "fuzz: $target ok: ${runs:-0} inputs in ${seconds}s (~$rate/s)"
  else
    echo "fuzz: $target FAILED; log $log" >&2
    grep -a -E "fuzz property broken|ERROR|SUMMARY|Test unit written" "$log" | head -6 >&2 || true
    echo "fuzz: reproduce with: $binary <the artifact above>" >&2
    failed+=("$target")
  fi
done
if ((${#failed[@]} > 0)); then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
