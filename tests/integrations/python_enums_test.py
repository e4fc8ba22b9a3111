"""strata_torch.enums against the C headers: every enum the package spells
has exactly the members and values of its typedef in include/strata/*.h.
argv[1]: the include/strata directory. Prints "python_enums_test: OK"."""
import glob
import os
import re
import sys

from strata_torch import enums

C_NAMES = {
    enums.Status: "strata_status",
    enums.BufferKind: "strata_buffer_kind",
    enums.ResidencyPolicy: "strata_residency_policy",
    enums.AccessMode: "strata_access_mode",
    enums.Tier: "strata_tier",
    enums.DType: "strata_dtype",
}


def c_enums(include_dir):
    """{typedef name: {member without STRATA_: value}} from the headers."""
    found = {}
    for header in sorted(glob.glob(os.path.join(include_dir, "*.h"))):
        with open(header, encoding="utf-8") as f:
            text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
        for body, name in re.findall(r"typedef enum \w+\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
            members = {}
            for m, v in re.findall(r"STRATA_(\w+)\s*=\s*(\d+)", body):
                members[m] = int(v)
            found[name] = members
    return found


def main():
    headers = c_enums(sys.argv[1])
    for py, c_name in C_NAMES.items():
        if c_name not in headers:
            print(f"python_enums_test: FAILED: no typedef enum {c_name} in {sys.argv[1]}")
            return 1
        mine = {m.name: m.value for m in py}
        if mine != headers[c_name]:
            print(f"python_enums_test: FAILED: {py.__name__} is {mine}, "
                  f"{c_name} is {headers[c_name]}")
            return 1
    print(f"python_enums_test: OK ({len(C_NAMES)} enums, "
          f"{sum(len(headers[c]) for c in C_NAMES.values())} members)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
