#!/usr/bin/env bash
# strata plan at the largest counts it takes (4096 GPUs of 1 TiB): one
# simulated rank stands for the job, so it finishes and holds at most 2 GiB
# (the bound is checked only in an unsanitized build, where RSS means it).
# Under the sanitizers the two plans on 1 TiB GPUs are left out: they are
# the same code as the other two over a larger device, and what they
# check, the bound, is not checked there.
# Usage: many_gpus.sh STRATA_BINARY SANITIZED(ON|OFF)
set -u
strata=$1
sanitized=$2
failed=0
run() {
  local out
  out=$(python3 - "$strata" plan "$@" <<'PY'
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(r.stdout + r.stderr)
print("exit", r.returncode)
print("maxrss_kib", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
)
  local rss
  rss=$(sed -n 's/^maxrss_kib //p' <<<"$out")
  if ! grep -q "^exit 0$" <<<"$out" || ! grep -q "modeled on 4096 GPUs" <<<"$out"; then
    echo "FAILED: plan $*: $out"
    failed=1
  elif [ "$sanitized" = OFF ] && [ "$rss" -gt $((2 * 1024 * 1024)) ]; then
    echo "FAILED: plan $* held ${rss} KiB, more than 2 GiB"
    failed=1
  else
    echo "ok: plan $* (${rss} KiB)"
  fi
}
if [ "$sanitized" = OFF ]; then
  run --model llama2-70b --zero 3 --gpus 4096 --gpu-memory 1TiB
  run --model llama2-70b --zero 3 --gpus 4096 --nodes 512 --hybrid-shard --gpu-memory 1TiB
else
  echo "sanitized build: the two plans on 1 TiB GPUs are left out (the 2 GiB bound is checked unsanitized)"
fi
run --model gpt2 --zero 0 --gpus 4096 --nodes 512
run --model llama2-70b --zero 3 --gpus 4096 --nodes 4096 --offload-params nvme --offload-optimizer nvme
exit "$failed"
