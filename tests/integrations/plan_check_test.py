"""bench/plan_check.py --measured DIR: each run's measured peaks (a
torch_train JSON) beside `strata plan`'s for the same job, as plan /
measured, and the closing line's ranges; a run whose JSON is missing or
did not train is named and left out. argv[1]: the build folder (its
tools/strata plans the runs)."""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)
import plan_check  # noqa: E402

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(BENCH, "..", "build", "default")
GIB = 2**30


def plan_json(model, batch, seq, opts):
    out = subprocess.run([os.path.join(BUILD, "tools", "strata"), "plan",
                          *plan_check.plan_args(model, batch, seq, opts), "--json", "-"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


class PlanCheckTest(unittest.TestCase):
    def run_main(self, argv):
        out = io.StringIO()
        saved = sys.argv
        sys.argv = ["plan_check.py", "--build", BUILD] + argv
        try:
            with contextlib.redirect_stdout(out):
                plan_check.main()
        finally:
            sys.argv = saved
        return out.getvalue()

    def test_measured_runs_beside_the_plan(self):
        with tempfile.TemporaryDirectory() as d:
            # Each run "measured" at 1.25 x, 0.8 x and 1.0 x the plan's own
            # figures, but the last run, which failed, and one left missing.
            for k, (name, model, batch, seq, opts) in enumerate(plan_check.RUNS):
                if k == len(plan_check.RUNS) - 1:
                    continue
                pl = plan_json(model, batch, seq, opts)
                if k == len(plan_check.RUNS) - 2:
                    results = {"native": {"mode": "native", "oom": "CUDA out of memory"},
                               "expandable": {"mode": "expandable"}}
                else:
                    results = {
                        "native": {"mode": "native",
                                   "peak_allocated_gib": pl["peak_tensor_bytes"] / GIB * 1.25,
                                   "peak_reserved_gib":
                                       pl["peak_reserved_pytorch_bytes"] / GIB * 0.8},
                        "expandable": {"mode": "expandable",
                                       "peak_reserved_gib":
                                           pl["peak_reserved_expandable_bytes"] / GIB}}
                with open(os.path.join(d, f"{name}.json"), "w", encoding="utf-8") as f:
                    json.dump({"args": {}, "results": results}, f)
            text = self.run_main(["--measured", d])
        n = len(plan_check.RUNS) - 2
        self.assertIn(f"plan check: {n} runs; peak allocated plan / measured 0.800..0.800; "
                      "default reserved 1.250..1.250; expandable 1.000..1.000", text)
        first = plan_check.RUNS[0][0]
        self.assertRegex(text, first + r" +allocated [0-9.]+ / [0-9.]+ = 0\.800, default ")
        self.assertIn(f"{plan_check.RUNS[-2][0]}", text)
        self.assertIn("did not train: CUDA out of memory", text)
        self.assertIn(f"{plan_check.RUNS[-1][0]}", text)
        self.assertIn("no measurement (FileNotFoundError", text)

    def test_the_two_tools_get_the_same_job(self):
        for _name, model, batch, seq, opts in plan_check.RUNS:
            train = plan_check.train_args(model, batch, seq, opts)
            planned = plan_check.plan_args(model, batch, seq, opts)
            for args in (train, planned):
                self.assertEqual(args[args.index("--model") + 1], model)
                self.assertEqual(args[args.index("--batch") + 1], str(batch))
                self.assertEqual(args[args.index("--seq") + 1], str(seq))
            self.assertEqual("--checkpointing" in train, "--checkpointing" in planned)
            self.assertEqual("--lora" in train, "--lora" in planned)
            self.assertEqual(opts.get("attn") == "eager", "--eager-attention" in planned)
            self.assertEqual(planned[planned.index("--dtype") + 1], opts.get("precision", "amp"))

    def test_a_missing_build_is_a_clear_error(self):
        saved = sys.argv
        sys.argv = ["plan_check.py", "--build", "/nonexistent", "--measured", "/tmp"]
        try:
            with self.assertRaises(SystemExit) as e:
                plan_check.main()
        finally:
            sys.argv = saved
        self.assertIn("no strata command at /nonexistent/tools/strata", str(e.exception))


if __name__ == "__main__":
    unittest.main()
