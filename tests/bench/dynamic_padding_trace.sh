#!/usr/bin/env bash
# bench/dynamic_padding_trace.py writes a trace strata replay reads: with
# one sequence length the steps repeat exactly and settle to no driver
# call; with changing lengths every step's last call differs (no steady
# step is found) and the report carries PyTorch's modeled reserves. Bad
# options exit 2 naming the option.
# Usage: dynamic_padding_trace.sh STRATA SOURCE_DIR
set -u
strata=$1
gen=$2/bench/dynamic_padding_trace.py
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
check() {  # check FILE PYTHON-CONDITION WHAT
  if python3 -c "import json,sys; d=json.load(open('$1')); sys.exit(0 if ($2) else 1)"; then
    echo "ok: $3"
  else
    echo "FAILED: $3 ($2) in $(cat "$1")"
    failed=1
  fi
}
python3 "$gen" --steps 6 --min-seq 1024 --max-seq 1024 >"$dir/fixed.json" || failed=1
python3 "$gen" --steps 6 --seed 3 >"$dir/varied.json" || failed=1
"$strata" replay "$dir/fixed.json" --timeline --quiet --json "$dir/fixed.out.json" || failed=1
"$strata" replay "$dir/varied.json" --timeline --quiet --json "$dir/varied.out.json" || failed=1
check "$dir/fixed.out.json" "d['timeline']['steady']['driver_calls'] == 0" \
  "one sequence length: the repeated step makes no driver call"
check "$dir/fixed.out.json" "d['events'] > 6 * 700" "six steps of about 740 calls"
check "$dir/varied.out.json" "d['timeline']['steady'] is None" \
  "changing lengths: no repeated step"
check "$dir/varied.out.json" \
  "0 < d['peak_live_bytes'] <= d['modeled_pytorch_peak_reserved_bytes']['expandable_segments']" \
  "PyTorch's modeled reserve holds the live bytes"
for case in "--steps 0|--steps must be 1 to 10000" "--min-seq 2048|--max-seq <= 1024" \
  "--multiple 0|0 < --multiple" "--max-seq 100|--min-seq <= --max-seq" "--frob 1|unrecognized" \
  "--longest-first 7 --steps 6|--longest-first must be 0 to --steps"; do
  args=${case%%|*}
  want=${case#*|}
  # shellcheck disable=SC2086
  out=$(python3 "$gen" $args 2>&1)
  rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAILED: $args exited $rc, said: $out"
    failed=1
  else
    echo "ok: $args refused: $want"
  fi
done
exit "$failed"
