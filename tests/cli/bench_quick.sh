#!/usr/bin/env bash
# Smoke test of `maf-sandbox bench --quick --json FILE` (issue 9): it runs, and the JSON names every
# scenario and baseline with its percentiles. No thresholds: CI machines are noisy.
set -euo pipefail
cli=$1
# The build's acas-emulator, when it has one: then the acas_ scenarios must run.
required_emulator=${2:-}
if [[ -n "$required_emulator" && ! -x "$(dirname "$cli")/acas-emulator" ]]; then
    echo "bench --quick: acas-emulator is not next to the CLI ($required_emulator); build it" >&2
    exit 1
fi
out=$(mktemp /tmp/maf-bench-json-XXXXXX)
trap 'rm -f "$out"' EXIT
"$cli" bench --quick --json "$out" >/dev/null
# The acas_ scenarios run when acas-emulator sits next to the CLI (else the bench skips them; the
# test requires them whenever the build has an emulator, checked above).
emulator=0
[[ -x "$(dirname "$cli")/acas-emulator" ]] && emulator=1
python3 - "$out" "$emulator" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["schema"] == "maf-sandbox-bench/1" and doc["mode"] == "quick", doc.get("schema")
for name in ("posix_spawn_true", "bwrap_true", "unshare_true"):
    assert name in doc["baselines"], f"baseline {name} missing"
expected = ["exec_true", "exec_true_spaced", "warm_acquire", "cold_acquire_to_first_output",
            "cold_acquire_pooled_to_first_output", "exec_1MiB_stdout", "file_write_read_3KiB",
            "file_write_read_32MiB", "churn_create_dispose", "cli_run_true", "cli_exec_warm_true",
            "cli_startup_version"]
scenarios = {s["name"]: s for s in doc["scenarios"]}
missing = [name for name in expected if name not in scenarios]
assert not missing, f"scenarios missing: {missing}"
for name in expected:
    stats = scenarios[name]["stats"]
    assert stats["n"] > 0 and stats["p50_ms"] > 0 and stats["p99_ms"] >= stats["p50_ms"], name
    assert "ratio_p50" in scenarios[name], name
churn = scenarios["churn_create_dispose"]
assert churn["cycles_per_s"] > 0 and all(v == 0 for v in churn["leaked"].values()), churn["leaked"]
density = scenarios["density"]
assert density["created"] == density["sandboxes"] > 0, density.get("stopped_by")
assert all(v == 0 for v in density["leaked"].values()), density["leaked"]
assert density["mib_per_sandbox_pss"] > 0 and density["processes_per_sandbox"] > 0, density
for label in ("3KiB", "32MiB"):
    assert scenarios["file_write_read_" + label]["checksum_ok"] is True, label
if sys.argv[2] == "1":
    for name in ("acas_cold_acquire", "acas_warm_acquire", "acas_exec_true",
                 "acas_file_write_read_3KiB"):
        assert name in scenarios, f"scenario {name} missing (acas-emulator is there)"
        assert scenarios[name]["stats"]["n"] > 0 and scenarios[name]["requests_per_op"] > 0, name
print(f"bench --quick: {len(scenarios)} scenarios in {doc['duration_s']:.1f} s")
PY
