"""The strata_torch package as a user gets it from `cmake --install`: in a
fresh prefix, imported by a python3 started plainly (no STRATA_* variable,
only the prefix's site directory on PYTHONPATH), it finds the installed
libstrata.so by itself and trains a small model offloaded to a sim device
with the losses of torch.optim.Adam (foreach=False) to 1e-5; the installed
libstrata_torch.so, loaded next, shares that one libstrata.so.

argv: the build directory, a scratch directory. Prints "SKIP: ..." when
torch is not installed, "installed_package_test: OK" when all held."""
import glob
import os
import shutil
import subprocess
import sys

CHILD = r'''
import os, sys
import torch
import strata_torch
from strata_torch import _native
prefix = sys.argv[1]
where = os.path.realpath(_native.find(_native.LIBSTRATA))
if not strata_torch.__file__.startswith(prefix) or not where.startswith(prefix):
    sys.exit(f"not the installed package and library: {strata_torch.__file__}, {where}")

def model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))

def batch(s):
    g = torch.Generator().manual_seed(100 + s)
    return torch.randn(8, 64, generator=g), torch.randint(0, 4, (8,), generator=g)

plain = model()
opt = torch.optim.Adam(plain.parameters(), lr=1e-3, foreach=False)
want = []
for s in range(4):
    x, y = batch(s)
    loss = torch.nn.functional.cross_entropy(plain(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    want.append(loss.item())
m = model()
off = strata_torch.offload(m, lr=1e-3, device="sim:capacity=64MiB")
got = []
for s in range(4):
    x, y = batch(s)
    loss = torch.nn.functional.cross_entropy(m(x), y)
    loss.backward()
    off.step()
    got.append(loss.item())
off.close()
worst = max(abs(a - b) for a, b in zip(got, want))
if worst > 1e-5:
    sys.exit(f"losses differ by {worst}: {got} vs {want}")
print(f"trained from {where}: losses within {worst:.1e}")

# The installed plugin links the installed libstrata.so (found beside it):
# one copy of Strata in the process, the prefix's.
plugin = os.path.realpath(_native.find(_native.TORCH_PLUGIN))
if os.path.exists(plugin):
    import ctypes
    ctypes.CDLL(plugin)
    with open("/proc/self/maps") as maps:
        copies = {line.split()[-1] for line in maps if "/libstrata.so" in line}
    if len(copies) != 1 or not all(os.path.realpath(c).startswith(prefix) for c in copies):
        sys.exit(f"the plugin's libstrata is not the prefix's one copy: {sorted(copies)}")
    print(f"plugin {plugin} shares {sorted(copies)[0]}")
'''


def main():
    try:
        import torch  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError as e:
        print(f"SKIP: torch is not installed ({e}); scripts/install-deps installs python3-torch")
        return 0
    build, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    prefix = os.path.realpath(os.path.join(scratch, "installed-package"))
    shutil.rmtree(prefix, ignore_errors=True)
    subprocess.run(["cmake", "--install", build, "--prefix", prefix], check=True,
                   stdout=subprocess.DEVNULL)
    sites = glob.glob(os.path.join(prefix, "lib", "python3*", "*-packages"))
    if len(sites) != 1 or not os.path.isdir(os.path.join(sites[0], "strata_torch")):
        print(f"installed_package_test: FAILED: no strata_torch package under {prefix}/lib "
              f"({sites})")
        return 1
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STRATA_") and k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = sites[0]
    run = subprocess.run([sys.executable, "-c", CHILD, prefix], env=env, cwd=scratch,
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        print(f"installed_package_test: FAILED: {run.stdout}{run.stderr}")
        return 1
    print(f"installed_package_test: {run.stdout.strip()}")
    shutil.rmtree(prefix, ignore_errors=True)
    print("installed_package_test: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
