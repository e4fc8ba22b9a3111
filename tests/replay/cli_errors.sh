#!/usr/bin/env bash
# `strata replay` on bad command lines and bad outputs: each exits 1 (never
# CLI11's own codes, never 0) with a message about what is wrong and only
# that. Usage: cli_errors.sh STRATA SOURCE_DIR
set -u
strata=$1
traces=$2/bench/traces
failed=0

# expect CODE PATTERN COMMAND...: the exit code and a line on stderr.
expect() {
  local code=$1 pattern=$2
  shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pattern" <<<"$err"; then
    echo "FAILED: $* -> exit $rc (expected $code), stderr: $err"
    failed=1
  else
    echo "ok: $*"
  fi
}

small=$traces/cs336_forward_small_cold.pickle
expect 1 "required" "$strata" replay
expect 1 "--bogus" "$strata" replay "$small" --bogus
expect 1 "device-index" "$strata" replay "$small" --device-index -1
expect 0 "" "$strata" replay --help
expect 1 "steady-steps" "$strata" replay "$small" --timeline --steady-steps 65
expect 1 "^strata replay: --device: " "$strata" replay "$small" --device sim:capacity=banana
expect 1 "cannot write the report to stdout" sh -c "'$strata' replay '$small' > /dev/full"
expect 1 "is a directory" "$strata" replay "$traces"
expect 1 "not a regular file" "$strata" replay /dev/zero
unknown=$(mktemp)
trap 'rm -f "$unknown"' EXIT
echo '{"events":[{"time_ns":1,"action":"defrag","address":"0x10","size":8,"stream":"0x0"}]}' >"$unknown"
expect 0 "warning: .*: 1 events with unknown action 'defrag' \(first at event 0\) are not replayed" \
  "$strata" replay "$unknown" --quiet
ooms=$("$strata" replay "$small" --device sim:capacity=64MiB | grep -c "OOM at event")
if [ "$ooms" -eq 0 ]; then
  echo "FAILED: no OOM on a 64 MiB device"
  failed=1
fi
quiet_err=$("$strata" replay "$small" --device sim:capacity=64MiB --quiet 2>&1)
if [ -n "$quiet_err" ]; then
  echo "FAILED: --quiet printed: $quiet_err"
  failed=1
else
  echo "ok: --quiet prints nothing on a replay with OOMs"
fi
exit $failed
