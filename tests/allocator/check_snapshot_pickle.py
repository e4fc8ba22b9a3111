"""Checks a snapshot pickle written by Strata against what PyTorch's memory
viewer (torch/utils/viz/MemoryViz.js, torch/cuda/_memory_viz.py) relies on,
using only the standard pickle module:

  - the structure and keys of torch.cuda.memory._dump_snapshot;
  - per segment, the blocks tile it exactly: the viewer gives each block
    the address "segment address + sizes of the blocks before it" and its
    stats assert free + allocated == total_size;
  - allocated_size / active_size / requested_size are the sums of the blocks;
  - trace events in time order, with PyTorch's keys (oom: device_free, no
    addr);
  - the segments over time: undoing segment_alloc/segment_free from the end
    state (as the viewer's "Allocator State History" does) always finds the
    exact segment, and every allocation lies inside a live segment;
  - alloc sizes are requested sizes (a live block's alloc event has its
    requested_size), and, with --complete (the trace dropped nothing and
    saw blocks allocated and freed), no block reads as "allocated before
    the trace" in the viewer's timeline and every kind of event is there.

  - frames are PyTorch's [{"name", "filename", "line"}]; with --frames,
    every alloc event and every live block has some.

Usage: check_snapshot_pickle.py FILE [LIVE_BLOCKS] [--complete] [--frames]
Exits non-zero with a message on the first mismatch."""
import pickle
import sys

SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id",
                "is_expandable", "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
STATES = {"active_allocated", "active_pending_free", "inactive"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom"}


def fail(msg):
    print("snapshot pickle: " + msg)
    sys.exit(1)


def check_frames(frames, what, required):
    if not isinstance(frames, list):
        fail("%s: frames is not a list" % what)
    for f in frames:
        if not isinstance(f, dict) or set(f) != {"name", "filename", "line"} \
                or not isinstance(f["name"], str) or not isinstance(f["line"], int):
            fail("%s: frame %r" % (what, f))
    if required and not frames:
        fail("%s has no frames" % what)


def check_segments(snap, frames):
    live = 0
    for seg in snap["segments"]:
        if set(seg) != SEGMENT_KEYS:
            fail("segment keys %s" % sorted(seg))
        if seg["segment_type"] not in ("small", "large") or seg["segment_pool_id"] != (0, 0):
            fail("segment type or pool id: %r" % seg)
        walk = seg["address"]
        sums = {"allocated": 0, "active": 0, "requested": 0}
        for b in seg["blocks"]:
            if set(b) != BLOCK_KEYS or b["state"] not in STATES:
                fail("block %r" % b)
            if b["address"] != walk:
                fail("segment %#x: block at %#x where the viewer's walk puts it at %#x"
                     % (seg["address"], b["address"], walk))
            if b["size"] <= 0:
                fail("segment %#x: empty block at %#x" % (seg["address"], b["address"]))
            walk += b["size"]
            check_frames(b["frames"], "block %#x" % b["address"],
                         frames and b["state"] == "active_allocated")
            if b["state"] == "active_allocated":
                live += 1
                sums["allocated"] += b["size"]
                sums["requested"] += b["requested_size"]
            if b["state"] != "inactive":
                sums["active"] += b["size"]
        if walk != seg["address"] + seg["total_size"]:
            fail("segment %#x: blocks cover %d of %d bytes"
                 % (seg["address"], walk - seg["address"], seg["total_size"]))
        for k, v in sums.items():
            if seg[k + "_size"] != v:
                fail("segment %#x: %s_size %d != sum of blocks %d"
                     % (seg["address"], k, seg[k + "_size"], v))
    return live


def check_trace(snap, complete, frames):
    traces = snap["device_traces"]
    if not isinstance(traces, list) or len(traces) != 1:
        fail("device_traces is not a list of one device")
    events = traces[0]
    last = None
    for e in events:
        if e.get("action") not in ACTIONS:
            fail("trace event %r" % e)
        keys = {"action", "size", "stream", "time_us", "frames"}
        keys.add("device_free" if e["action"] == "oom" else "addr")
        if set(e) != keys:
            fail("trace event keys %s" % sorted(e))
        check_frames(e["frames"], "%s event" % e["action"], frames and e["action"] == "alloc")
        if last is not None and e["time_us"] < last:
            fail("trace events out of time order")
        last = e["time_us"]

    # Segments over time: undo the events from the end state, as the viewer.
    segs = {s["address"]: s["total_size"] for s in snap["segments"]}
    for e in reversed(events):
        if e["action"] == "segment_alloc":
            if segs.get(e["addr"]) != e["size"]:
                fail("segment_alloc %#x+%d is not a segment then" % (e["addr"], e["size"]))
            del segs[e["addr"]]
        elif e["action"] == "segment_free":
            if e["addr"] in segs:
                fail("segment_free %#x of a segment that exists then" % e["addr"])
            segs[e["addr"]] = e["size"]

    def inside(addr):
        return any(a <= addr < a + n for a, n in segs.items())

    # Forward again: every allocation inside a live segment.
    allocated = {}
    first_free_of_unknown = 0
    for e in events:
        a = e["action"]
        if a == "segment_alloc":
            segs[e["addr"]] = e["size"]
        elif a == "segment_free":
            del segs[e["addr"]]
        elif a == "alloc":
            if not inside(e["addr"]):
                fail("alloc at %#x outside every segment" % e["addr"])
            allocated[e["addr"]] = e["size"]
        elif a == "free_completed":
            if e["addr"] in allocated:
                del allocated[e["addr"]]
            else:
                first_free_of_unknown += 1
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] != "active_allocated":
                continue
            if b["address"] in allocated:
                if allocated[b["address"]] != b["requested_size"]:
                    fail("alloc event of %#x has size %d, its block requested %d"
                         % (b["address"], allocated[b["address"]], b["requested_size"]))
            elif complete:
                fail("block %#x reads as allocated before the trace" % b["address"])
    if complete and first_free_of_unknown:
        fail("%d frees of blocks the trace never allocated" % first_free_of_unknown)
    return events


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    complete = "--complete" in sys.argv
    with open(args[0], "rb") as f:
        snap = pickle.load(f)
    if not isinstance(snap, dict) or "segments" not in snap or "device_traces" not in snap:
        fail("top level is not a dict with segments and device_traces")
    frames = "--frames" in sys.argv
    live = check_segments(snap, frames)
    if len(args) > 1 and live != int(args[1]):
        fail("%d live blocks, expected %d" % (live, int(args[1])))
    events = check_trace(snap, complete, frames)
    seen = {e["action"] for e in events}
    for action in ("alloc", "free_requested", "free_completed", "segment_alloc"):
        if complete and action not in seen:
            fail("no %s event in the trace" % action)
    print("snapshot pickle: %d segments, %d events, %d live blocks: ok"
          % (len(snap["segments"]), len(events), live))


main()
