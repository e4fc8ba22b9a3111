#!/usr/bin/env bash
# `strata replay --snapshot` on every bundled trace (and on small devices,
# where pages are stitched and requests fail), each export checked against
# what PyTorch's memory viewer relies on (check_snapshot_pickle.py), and
# read back by `strata replay` itself. Usage: snapshot_exports.sh STRATA SOURCE_DIR
set -euo pipefail
strata=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
check() {
  python3 "$src/tests/allocator/check_snapshot_pickle.py" "$1" --complete
  "$strata" replay "$1" --quiet --device "${2:-sim:capacity=80GiB}"
}
traces=("$src"/bench/traces/*.pickle "$src"/bench/traces/*.csv)
# Under the sanitizers (STRATA_SNAPSHOT_QUICK=1 in their test presets) the
# smallest bundled trace stands for the others: the same code paths in a
# fraction of the time; the default preset exports every one.
if [ "${STRATA_SNAPSHOT_QUICK:-0}" = 1 ]; then
  traces=("$src"/bench/traces/cs336_forward_small_cold.pickle)
fi
for trace in "${traces[@]}" "$src"/bench/traces/formats/*.pickle "$src"/bench/traces/formats/*.csv; do
  echo "== $(basename "$trace")"
  "$strata" replay "$trace" --quiet --snapshot "$out/s.pickle"
  check "$out/s.pickle"
done
echo "== cs336_train_fwd_bwd_cold.pickle on 940 MiB (stitches)"
"$strata" replay "$src/bench/traces/cs336_train_fwd_bwd_cold.pickle" --device sim:capacity=940MiB \
  --snapshot "$out/s.pickle" | grep -E "stitches +[1-9]"
check "$out/s.pickle"
echo "== cs336_forward_small_cold.pickle on 64 MiB (OOMs)"
"$strata" replay "$src/bench/traces/cs336_forward_small_cold.pickle" --device sim:capacity=64MiB \
  --snapshot "$out/s.pickle" | grep -E "OOMs +[1-9]"
check "$out/s.pickle" sim:capacity=64MiB
"$strata" replay "$out/s.pickle" --device sim:capacity=64MiB | grep -q "recording allocator's OOMs"
echo "all snapshot exports draw in PyTorch's viewer"
