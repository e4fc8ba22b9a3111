"""bench/torch_train.py --rounds: the modes run interleaved, a mode's step
time is the median of its rounds' medians, each round's ratio is printed,
and --json keeps every round. The children are stubbed (no GPU needed):
run_mode returns what a child would print. Also: the run's options
(--attn, --lora, --precision) reach each child's command line, and the
offloaded modes print their comparison and the gradients line, read off
the offload's state."""

import contextlib
import io
import itertools
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import torch_train  # noqa: E402

# Step times (s) a child reports, in call order: native, strata, native, strata, ...
STEPS = [[0.9, 0.150, 0.150], [0.9, 0.160, 0.160], [0.9, 0.143, 0.143], [0.9, 0.161, 0.161],
         [0.9, 0.144, 0.144], [0.9, 0.159, 0.159]]


def stub_children():
    calls = itertools.count()
    order = []

    def run_mode(mode, args):
        n = next(calls)
        order.append(mode)
        r = {"mode": mode, "step_s": STEPS[n], "host_s": [0.1, 0.05, 0.05],
             "peak_allocated_gib": 1.0, "peak_reserved_gib": 1.5, "device_used_gib": 2.0}
        if mode == "strata":
            r.update(stitches=0, driver_calls=0, device_wait_ms=0.0)
        return r

    return run_mode, order


class RoundsTest(unittest.TestCase):
    def run_main(self, argv):
        run_mode, order = stub_children()
        out = io.StringIO()
        saved = (torch_train.run_mode, torch_train.missing, sys.argv)
        torch_train.run_mode = run_mode
        torch_train.missing = lambda lora=False: None
        sys.argv = ["torch_train.py"] + argv
        try:
            with contextlib.redirect_stdout(out):
                torch_train.main()
        finally:
            torch_train.run_mode, torch_train.missing, sys.argv = saved
        return out.getvalue(), order

    def test_rounds_interleave_and_take_the_median(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            text, order = self.run_main(["--modes", "native,strata", "--rounds", "3",
                                         "--json", path])
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
        self.assertEqual(order, ["native", "strata"] * 3)
        # Each round's ratio of medians: 160/150, 161/143, 159/144.
        self.assertIn("torch train: rounds, step strata / native: 1.067, 1.126, 1.104", text)
        # Medians of the rounds: strata 160, native 144.
        self.assertIn("torch train: step strata / native 1.111;", text)
        self.assertIn("  native #2  step 143.0 ms", text)
        self.assertEqual(len(saved["rounds"]["strata"]), 3)
        self.assertEqual(saved["results"]["native"]["step_s"], STEPS[0])

    def test_the_last_half_is_the_steady_state(self):
        # Four steps: warm-up 0.9 and 0.5, then 0.2 and 0.1: the last half's median is 0.15.
        self.assertAlmostEqual(torch_train.last_half_time({"step_s": [0.9, 0.5, 0.2, 0.1]}), 0.15)
        self.assertAlmostEqual(torch_train.last_half_time({"step_s": [0.9, 0.5, 0.2]}), 0.35)
        self.assertIsNone(torch_train.last_half_time({"step_s": [0.9, 0.5]}))
        text, _ = self.run_main(["--modes", "native,strata"])
        # The stubs' steps 0.9, 0.15, 0.15 (native) and 0.9, 0.16, 0.16 (strata).
        self.assertIn("  native     step 150.0 ms (host queues it in 50.0), last half 150.0 ms", text)
        self.assertIn("torch train: last half of the steps, strata / native 1.067", text)

    def test_one_round_prints_as_before(self):
        text, order = self.run_main(["--modes", "native,strata"])
        self.assertEqual(order, ["native", "strata"])
        self.assertNotIn("rounds", text)
        self.assertIn("  native     step 150.0 ms", text)
        self.assertIn("torch train: step strata / native 1.067;", text)

    def test_the_runs_options_reach_the_child(self):
        seen = {}

        class Done:
            returncode = 0
            stdout = '{"mode": "native"}\n'
            stderr = ""

        def run(cmd, **kwargs):
            seen["cmd"] = cmd
            seen["env"] = kwargs.get("env", {})
            return Done()

        saved = torch_train.subprocess.run
        torch_train.subprocess.run = run
        try:
            args = torch_train.argparse.Namespace(
                model="gpt2", batch=2, seq=256, steps=3, limit_gib=0.0, build="b",
                attn="eager", lora=8, precision="fp32", checkpointing=True, profile=False,
                snapshot=None, strata_trace=None, offload_adam="host")
            self.assertEqual(torch_train.run_mode("native", args), {"mode": "native"})
            cmd = " ".join(seen["cmd"])
            for part in ("--child native", "--attn eager", "--lora 8", "--precision fp32",
                         "--checkpointing", "--offload-adam host"):
                self.assertIn(part, cmd)
            self.assertNotIn("--strata-trace", cmd)
            self.assertNotIn("trace_buffer", seen["env"].get("STRATA_CONF", ""))
            # --strata-trace: the strata child writes the trace, its
            # STRATA_CONF keeps what the user set and turns the ring on.
            args.strata_trace = "t.json"
            saved_conf = os.environ.get("STRATA_CONF")
            os.environ["STRATA_CONF"] = "release_threshold:0"
            try:
                torch_train.run_mode("strata", args)
            finally:
                if saved_conf is None:
                    del os.environ["STRATA_CONF"]
                else:
                    os.environ["STRATA_CONF"] = saved_conf
            self.assertIn("--strata-trace t.json", " ".join(seen["cmd"]))
            self.assertEqual(seen["env"]["STRATA_CONF"],
                             "release_threshold:0," + torch_train.TRACE_CONF)
        finally:
            torch_train.subprocess.run = saved

    def test_strata_prints_its_steps(self):
        # Two steps: the first maps 10 pages (10 creates, 10 maps, one
        # set_access) and locks for 2 ms, the second makes 4 event calls only.
        first = {"driver_calls.create_pages": 10, "driver_calls.map": 10,
                 "driver_calls.set_access": 1, "driver_calls.record_event": 3,
                 "locked_call_ns": 2_000_000}
        second = dict(first, **{"driver_calls.record_event": 7, "locked_call_ns": 2_500_000})
        r = {"mode": "strata", "step_s": [0.9, 0.15], "per_step_cumulative": [first, second]}
        self.assertEqual(torch_train.per_step_line(r),
                         "             per step: ms 900, 150; memory driver calls 21, 0; "
                         "locked ms 2.0, 0.5")

    def test_bad_options_are_refused(self):
        with self.assertRaises(SystemExit) as e:
            self.run_main(["--lora", "-1"])
        self.assertIn("--lora must be a rank of 0 to 4096", str(e.exception))
        for bad in (["--attn", "flash"], ["--precision", "fp16"]):
            with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
                self.run_main(bad)

    def test_offloaded_modes_against_fsdp_and_an_uncapped_run(self):
        calls = []

        def run_mode(mode, args):
            calls.append((mode, args.limit_gib))
            if mode == "native" and args.limit_gib:
                return {"mode": mode, "step_s": [], "host_s": [], "peak_allocated_gib": 15.9,
                        "peak_reserved_gib": 16.0, "device_used_gib": 16.5,
                        "oom": "CUDA out of memory"}
            steps = {"native": [1.0, 0.3, 0.3], "offload": [5.0, 1.2, 1.4],
                     "fsdp-cpu-offload": [6.0, 3.2, 3.4]}[mode]
            losses = {"native": [12.0, 11.5, 11.0], "offload": [12.0, 11.504, 11.008],
                      "fsdp-cpu-offload": [12.01, 11.51, 11.02]}[mode]
            r = {"mode": mode, "step_s": steps, "host_s": steps, "losses": losses,
                 "peak_allocated_gib": {"native": 30.0, "offload": 14.2,
                                        "fsdp-cpu-offload": 8.99}[mode],
                 "peak_reserved_gib": 15.0, "device_used_gib": 16.0}
            if mode == "offload":  # what offload_state() reports after the steps
                r["offload_state"] = {"gradients": {"in_backward": 1014, "after_backward": 0}}
            return r

        out = io.StringIO()
        saved = (torch_train.run_mode, torch_train.missing, sys.argv)
        torch_train.run_mode = run_mode
        torch_train.missing = lambda lora=False: None
        sys.argv = ["torch_train.py", "--modes", "native,offload,fsdp-cpu-offload",
                    "--limit-gib", "16", "--checkpointing"]
        try:
            with contextlib.redirect_stdout(out):
                torch_train.main()
        finally:
            torch_train.run_mode, torch_train.missing, sys.argv = saved
        text = out.getvalue()
        # Every mode under the cap, then the native run again without it.
        self.assertEqual(calls, [("native", 16.0), ("offload", 16.0),
                                 ("fsdp-cpu-offload", 16.0), ("native", 0.0)])
        self.assertIn("OOM: CUDA out of memory", text)
        # Steps 1.3 / 3.3 s; Strata's losses against the uncapped run's: 8e-3 at most.
        self.assertIn("offload: step strata / fsdp-cpu-offload 0.394; device peak GiB strata "
                      "14.20, fsdp 8.99; loss difference 8.00e-03\n"
                      "offload: gradients taken in backward 1014, after backward 0\n", text)

    def test_the_offloads_state_is_read_off_it(self):
        """offload_state() is the Offload's stats(), an error from it is
        kept as text, and a mode with no Offload has none."""
        import torch_offload_modes

        class FakeOffload:
            def __init__(self, fail=False):
                self.fail = fail

            def stats(self):
                if self.fail:
                    raise RuntimeError("closed")
                return {"gradients": {"in_backward": 3, "after_backward": 1,
                                      "held_for_backward": 1, "in_grad": 1}, "offload": {}}

        self.assertIsNone(torch_offload_modes.offload_state({}))
        self.assertEqual(torch_offload_modes.offload_state({"offload": FakeOffload(True)}),
                         {"stats_error": "closed"})
        state = torch_offload_modes.offload_state({"offload": FakeOffload()})
        self.assertEqual(state["gradients"]["held_for_backward"], 1)
        self.assertEqual(torch_offload_modes.gradients_line({"offload": {"offload_state": state}}),
                         "offload: gradients taken in backward 3, after backward 1")
        self.assertEqual(torch_offload_modes.gradients_line({"offload": {"oom": "x"}}),
                         "offload: gradients taken n/a")

    def test_offloaded_modes_take_no_lora(self):
        with self.assertRaises(SystemExit) as e:
            self.run_main(["--modes", "offload", "--lora", "8"])
        self.assertIn("offload trains every parameter: no --lora", str(e.exception))

    def test_bad_rounds_are_refused(self):
        for bad in ("0", "17"):
            with self.assertRaises(SystemExit) as e:
                self.run_main(["--rounds", bad])
            self.assertIn("--rounds must be 1 to 16", str(e.exception))


if __name__ == "__main__":
    unittest.main()
