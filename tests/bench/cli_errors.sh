#!/usr/bin/env bash
# The custom benchmarks' command lines: --help prints the usage and exits 0;
# a key without a value, an unknown key and each out-of-range or malformed
# value exit 1 with a message naming the option, before anything runs.
# Usage: cli_errors.sh NVME_BENCH PREFETCH_BENCH GRADIENTS_BENCH DRIVER_BENCH
set -u
nvme=$1
prefetch=$2
gradients=$3
driver=$4
failed=0
# expect CODE PATTERN PROGRAM ARGS...
expect() {
  local code=$1 pattern=$2
  shift 2
  local out rc
  out=$(timeout 20 "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$pattern" <<<"$out"; then
    echo "FAILED: $* exited $rc (wanted $code), said: $out"
    failed=1
  else
    echo "ok: $(basename "$1") ${*:2} -> $pattern"
  fi
}
for program in "$nvme" "$prefetch" "$gradients" "$driver"; do
  expect 0 "usage: $(basename "$program")" "$program" --help
  expect 1 "unknown option --frob" "$program" --frob 1
done
expect 1 "--dir needs a value" "$nvme" --dir
expect 1 "--bytes must be a multiple of 4KiB, 1MiB to 1TiB, not 0" "$nvme" --bytes 0
expect 1 "--bytes must be a multiple of 4KiB, 1MiB to 1TiB, not 1000000" "$nvme" --bytes 1000000
expect 1 "--block-size must be a multiple of 4KiB, 4KiB to 1GiB, not 100" "$nvme" --block-size 100
expect 1 "--queue-depth must be a whole number from 1 to 4096, not 'abc'" "$nvme" --queue-depth abc
expect 1 "--repetitions must be a whole number from 1 to 100, not '0'" "$nvme" --repetitions 0
expect 1 "--layers must be a whole number from 5 to 4096, not '2x'" "$prefetch" --layers 2x
expect 1 "--gbps must be a number above 0 and at most 1000, not '0'" "$prefetch" --gbps 0
expect 1 "--gbps must be a number above 0 and at most 1000, not 'nan'" "$prefetch" --gbps nan
expect 1 "--param must be 4KiB to 1GiB" "$prefetch" --param 0
expect 1 "--per-step must be a whole number from 0 to 1, not '2'" "$prefetch" --per-step 2
expect 1 "--host + --resident < --layers" "$prefetch" --layers 5 --resident 4 --host 1
expect 1 "--steps needs a value" "$gradients" --steps
expect 1 "--ranks must be a whole number from 2 to 64, not '1'" "$gradients" --ranks 1
expect 1 "--compute-ms must be a number above 0 and at most 60000, not '-1'" "$gradients" --compute-ms -1
expect 1 "--grad must be 1KiB to 1GiB" "$gradients" --grad 4GiB
expect 1 "--bytes must be 1MiB to 64GiB, not '0'" "$driver" --bytes 0
expect 1 "--bytes must be a multiple of the granularity" "$driver" --bytes 3000000
expect 1 "--runs: each size must be a multiple of the granularity (2097152 bytes) that divides --bytes (268435456), not 3145728" "$driver" --runs 2MiB,3MiB
expect 1 "--runs: each size must be a multiple of the granularity (2097152 bytes) that divides --bytes (4194304), not 8388608" "$driver" --bytes 4MiB --runs 8MiB
expect 1 "--runs" "$driver" --runs 2MiB,,4MiB
expect 1 "--runs" "$driver" --runs abc
expect 1 "--device: " "$driver" --device frob
expect 1 "--json: cannot write /nonexistent/dir/d.json" "$driver" --bytes 4MiB --json /nonexistent/dir/d.json
exit "$failed"
