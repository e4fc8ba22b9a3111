"""Checks a snapshot pickle written by Strata against the structure of
PyTorch's torch.cuda.memory._dump_snapshot, using only the standard pickle
module (what PyTorch's memory visualizer and scripts rely on).

Usage: check_snapshot_pickle.py FILE LIVE_BLOCKS
Exits non-zero with a message on the first mismatch."""
import pickle
import sys

SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id",
                "is_expandable", "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
STATES = {"active_allocated", "active_pending_free", "inactive"}
TRACE_KEYS = {"action", "addr", "size", "stream", "time_us", "frames"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_map", "segment_unmap", "oom"}


def fail(msg):
    print("snapshot pickle: " + msg)
    sys.exit(1)


def main():
    with open(sys.argv[1], "rb") as f:
        snap = pickle.load(f)
    live_expected = int(sys.argv[2])
    if not isinstance(snap, dict) or "segments" not in snap or "device_traces" not in snap:
        fail("top level is not a dict with segments and device_traces")
    live = 0
    for seg in snap["segments"]:
        if set(seg) != SEGMENT_KEYS:
            fail("segment keys %s" % sorted(seg))
        if seg["segment_type"] not in ("small", "large") or seg["segment_pool_id"] != (0, 0):
            fail("segment type or pool id: %r" % seg)
        total = 0
        end = seg["address"]
        for b in seg["blocks"]:
            if set(b) != BLOCK_KEYS or b["state"] not in STATES:
                fail("block %r" % b)
            if b["address"] < end:
                fail("blocks overlap or are out of order in segment at %#x" % seg["address"])
            end = b["address"] + b["size"]
            if b["state"] == "active_allocated":
                live += 1
            total += b["size"]
        if end > seg["address"] + seg["total_size"]:
            fail("a block runs past its segment")
        allocated = sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
        if allocated != seg["allocated_size"]:
            fail("allocated_size %d != sum of blocks %d" % (seg["allocated_size"], allocated))
    if live != live_expected:
        fail("%d live blocks, expected %d" % (live, live_expected))
    traces = snap["device_traces"]
    if not isinstance(traces, list) or len(traces) != 1:
        fail("device_traces is not a list of one device")
    seen = set()
    for e in traces[0]:
        if set(e) != TRACE_KEYS or e["action"] not in ACTIONS:
            fail("trace event %r" % e)
        seen.add(e["action"])
    for action in ("alloc", "free_requested", "free_completed", "segment_map"):
        if action not in seen:
            fail("no %s event in the trace" % action)
    print("snapshot pickle: %d segments, %d events, %d live blocks: ok"
          % (len(snap["segments"]), len(traces[0]), live))


main()
