"""Writes the small format-coverage traces in this folder, each in the exact
structure its recorder writes (field names, types and order as in PyTorch's
torch/csrc/cuda/memory_snapshot.cpp and RMM's logging_resource_adaptor):

  oom_expandable.pickle     PyTorch >= 2.1 with expandable segments:
                            segment_map/segment_unmap, an `oom` entry
                            (device_free, no addr), `snapshot` and
                            `user_defined` markers
  no_block_address.pickle   PyTorch 2.0-2.1: blocks without `address` (the
                            viewer walks the segment), warm (live blocks)
  rmm_failure_fmt.csv       RMM up to 24.10 (fmt): pointers as 0x..., a
                            failed allocation's pointer as 0x0
  rmm_failure_current.csv   RMM 24.12 and later (%p): a failed allocation's
                            pointer as (nil)

Usage: python3 make_format_traces.py   (writes next to itself)"""
import os
import pickle

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
STREAM = 0


def frames(line):
    return [{"name": "forward", "filename": "model.py", "line": line}]


def event(action, addr, size, t, line=None):
    e = {"action": action, "addr": addr, "size": size, "stream": STREAM, "time_us": t}
    e["frames"] = frames(line) if line else []
    return e


def oom_expandable():
    base = 0x7F0000000000
    ev = []
    t = 1000
    ev.append(event("segment_map", base, 20 * MiB, t))
    ev.append(event("alloc", base, 8 * MiB, t + 1, 10))
    ev.append(event("alloc", base + 8 * MiB, 8 * MiB, t + 2, 11))
    ev.append(event("segment_map", base + 20 * MiB, 20 * MiB, t + 3))
    ev.append(event("alloc", base + 16 * MiB, 16 * MiB, t + 4, 12))
    ev.append({"action": "snapshot", "addr": 0, "size": 0, "stream": STREAM, "time_us": t + 5,
               "frames": []})
    # The recording allocator could not find 64 MiB with 30 MiB free.
    ev.append({"action": "oom", "device_free": 30 * MiB, "size": 64 * MiB, "stream": STREAM,
               "time_us": t + 6, "frames": frames(13)})
    ev.append(event("free_requested", base, 8 * MiB, t + 7, 10))
    ev.append(event("free_completed", base, 8 * MiB, t + 8, 10))
    ev.append({"action": "user_defined", "addr": 0, "size": 0, "stream": STREAM,
               "time_us": t + 9, "frames": []})
    ev.append(event("free_requested", base + 16 * MiB, 16 * MiB, t + 10, 12))
    ev.append(event("free_completed", base + 16 * MiB, 16 * MiB, t + 11, 12))
    ev.append(event("segment_unmap", base + 20 * MiB, 20 * MiB, t + 12))
    segments = [{
        "device": 0, "address": base, "total_size": 20 * MiB, "allocated_size": 8 * MiB,
        "active_size": 8 * MiB, "requested_size": 8 * MiB, "stream": STREAM,
        "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": True,
        "frames": [],
        "blocks": [
            {"address": base, "size": 8 * MiB, "requested_size": 8 * MiB, "state": "inactive",
             "frames": []},
            {"address": base + 8 * MiB, "size": 8 * MiB, "requested_size": 8 * MiB,
             "state": "active_allocated", "frames": frames(11)},
            {"address": base + 16 * MiB, "size": 4 * MiB, "requested_size": 4 * MiB,
             "state": "inactive", "frames": []},
        ],
    }]
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "max_split_size": -1,
                "garbage_collection_threshold": 0.0, "expandable_segments": True,
                "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
                "pinned_use_cuda_host_register": False, "roundup_power2_divisions": {}}
    return {"segments": segments, "device_traces": [ev], "allocator_settings": settings}


def no_block_address():
    # PyTorch 2.0: blocks carry size, state and history but no address (and
    # one no requested_size: its history's real_size stands for it); two
    # blocks are live before the trace begins.
    base = 0x7E0000000000
    blocks = [
        {"size": 2 * MiB, "requested_size": 2 * MiB, "state": "active_allocated",
         "history": [{"addr": base, "real_size": 2 * MiB, "frames": frames(20)}]},
        {"size": 4 * MiB, "requested_size": 3 * MiB, "state": "inactive", "history": []},
        {"size": 6 * MiB, "state": "active_allocated",
         "history": [{"addr": base + 6 * MiB, "real_size": 5 * MiB, "frames": frames(21)}]},
        {"size": 8 * MiB, "requested_size": 8 * MiB, "state": "inactive", "history": []},
    ]
    segments = [{"device": 0, "address": base, "total_size": 20 * MiB,
                 "allocated_size": 8 * MiB, "active_size": 8 * MiB, "stream": STREAM,
                 "segment_type": "large", "blocks": blocks}]
    ev = [event("alloc", base + 2 * MiB, 3 * MiB, 1, 22),
          event("free_requested", base + 2 * MiB, 3 * MiB, 2, 22),
          event("free_completed", base + 2 * MiB, 3 * MiB, 3, 22),
          event("alloc", base + 12 * MiB, 8 * MiB, 4, 23),
          event("free_requested", base + 12 * MiB, 8 * MiB, 5, 23),
          event("free_completed", base + 12 * MiB, 8 * MiB, 6, 23)]
    return {"segments": segments, "device_traces": [ev]}


def rmm(null_pointer, pointer):
    rows = ["Thread,Time,Action,Pointer,Size,Stream"]
    t = 0
    for i, (action, ptr, size) in enumerate([
            ("allocate", 0x7F1000000000, 256 * MiB),
            ("allocate", 0x7F1010000000, 512 * MiB),
            ("allocate failure", None, 40 << 30),
            ("free", 0x7F1000000000, 256 * MiB),
            ("allocate", 0x7F1000000000, 128 * MiB),
            ("free", 0x7F1010000000, 512 * MiB),
            ("free", 0x7F1000000000, 128 * MiB)]):
        t += 1
        p = null_pointer if ptr is None else pointer(ptr)
        rows.append("140245,10:00:%02d.%06d,%s,%s,%d,%s" % (t, i * 1000, action, p, size,
                                                              pointer(0) if ptr else null_pointer))
    return "\n".join(rows) + "\n"


def main():
    with open(os.path.join(HERE, "oom_expandable.pickle"), "wb") as f:
        pickle.dump(oom_expandable(), f, protocol=2)
    with open(os.path.join(HERE, "no_block_address.pickle"), "wb") as f:
        pickle.dump(no_block_address(), f, protocol=2)
    with open(os.path.join(HERE, "rmm_failure_fmt.csv"), "w") as f:
        f.write(rmm("0x0", lambda p: "0x%x" % p))
    with open(os.path.join(HERE, "rmm_failure_current.csv"), "w") as f:
        f.write(rmm("(nil)", lambda p: "0x%x" % p if p else "(nil)"))


main()
