#!/usr/bin/env bash
# `strata plan` on hostile input: every bad value exits 1 within 60 s with a
# message in the flags' own names, never a wrapped number, a lie ("FITS ...
# 0 B"), a hang or a crash. Usage: cli_errors.sh STRATA
set -u
strata=$1
failed=0

# expect PATTERN ARGS...: exit 1 and a line on stderr matching PATTERN.
expect() {
  local pattern=$1
  shift
  local err rc
  err=$(timeout 60 "$strata" plan "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 1 ] || ! grep -qE -- "$pattern" <<<"$err"; then
    echo "FAILED: plan $* -> exit $rc (expected 1), stderr: $err"
    failed=1
  else
    echo "ok: plan $*"
  fi
}

expect "--batch: must be a count" --model gpt2 --batch -1
expect "--grad-accum: must be a count" --model gpt2 --grad-accum -1
expect "--gpus: must be a count" --model gpt2 --gpus -1
expect "--seq must be from 1 to 1048576" --model gpt2 --seq 4611686018427387904
expect "hidden \(--hidden\) must be from 1 to 65536" --layers 4 --hidden 4294967296 --heads 16 --vocab 100
expect "layers \(--layers\) must be from 1 to 512" --layers 4294967296 --hidden 64 --heads 4 --vocab 100
expect "--gpus must be from 1 to 4096" --model gpt2 --zero 3 --gpus 5000
expect "--gpu-memory 16 TiB is more than 1 TiB" --model gpt2 --gpu-memory 16TiB
expect "--tflops must be from 0.001" --model gpt2 --tflops 0
expect "--tflops must be from 0.001" --model gpt2 --tflops 1e-9
expect "--hbm-gbps must be from 0.001" --model gpt2 --hbm-gbps 0
expect "--gpu a100: not a GPU the plan knows \(h100\)" --model gpt2 --gpu a100
expect "--nvlink-gbps must be from 0.001" --model gpt2 --nvlink-gbps 0
expect "--nvme-gbps must be from 0.001" --model gpt2 --nvme-gbps 0
expect "--model gpt2 has its own shape" --model gpt2 --layers 3
expect "--lora-mlp needs --lora" --model gpt2 --lora-mlp
expect "--allocator must be all, strata, pytorch or expandable, not 'torch'" --model gpt2 --allocator torch
expect "--json - and --html - would both write to stdout" --model gpt2 --json - --html -
expect "cannot write /nonexistent/dir/x.json: No such file or directory" --model gpt2 --json /nonexistent/dir/x.json
expect "--nvme-dir /proc/none: measuring the disk, a scratch file could not be made" --model gpt2 --zero 3 --offload-params nvme --nvme-dir /proc/none
expect "--gpu-memory 2 GiB leaves 1 GiB after the CUDA context" --model llama2-70b --zero 3 --gpu-memory 2GiB
exit "$failed"
