"""Where each of an offload's buffers may go (_offload.py,
docs/integrations.md, "Where each buffer may go"): the places named by
patterns over the buffers' names and by fractions of their bytes.

Pure functions over names and sizes; no torch, no Strata calls.
"""

import fnmatch
from typing import Dict, Iterable, List, Mapping, Tuple, Union, cast

from .errors import PlacementError

__all__ = ["PLACES", "placements"]

# "device": pinned on the device; "host": never below host memory; "nvme":
# written to NVMe at each last release; "offload": host, then NVMe, as room
# requires (the default).
PLACES = ("device", "host", "nvme", "offload")

Placement = Union[Mapping[str, str], Iterable[Tuple[str, str]], None]
Share = Union[str, Mapping[str, float]]


def placements(params: List[Tuple[str, int, bool, bool]], placement: Placement,
               parameters: Share, optimizer_state: Share, gradients: Share) -> Dict[str, str]:
    """The place of every buffer named by `placement`'s patterns or by the
    fractions, as {name: place}; buffers left out are "offload".

    `params` is [(name, fp32 bytes, has a master, has a gradient)] in the
    model's order; each parameter has two moments, named with ".exp_avg"
    and ".exp_avg_sq" added, a bf16 one its fp32 master copy, ".master"
    (optimizer state, as DeepSpeed counts it), and one that requires grad
    its gradient, ".grad"; a bf16 parameter and its gradient weigh half
    their fp32 bytes.
    `placement` maps fnmatch patterns over those names to places (a dict,
    or pairs in order): a buffer takes its first matching pattern's place.
    `parameters`, `optimizer_state` and `gradients` place the buffers no
    pattern matched: a place for all of them, or {place: fraction} of their bytes
    taken in the model's order (a buffer goes where its first byte falls;
    "device" first, then "host", then "nvme", the rest "offload").
    Errors (PlacementError, an OffloadError): a placement that is neither
    a mapping nor pairs, an unknown place, a pattern that matches nothing,
    fractions outside [0, 1] or above 1 together."""
    buffers = []
    for name, nbytes, has_master, has_grad in params:
        own = nbytes // 2 if has_master else nbytes
        buffers.append((name, "parameters", own))
        buffers.append((f"{name}.exp_avg", "optimizer_state", nbytes))
        buffers.append((f"{name}.exp_avg_sq", "optimizer_state", nbytes))
        if has_master:
            buffers.append((f"{name}.master", "optimizer_state", nbytes))
        if has_grad:
            buffers.append((f"{name}.grad", "gradients", own))
    places: Dict[str, str] = {}
    for pattern, place in _pairs(placement):
        _check_place(place, f"placement[{pattern!r}]")
        matched = [n for n, _k, _b in buffers if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            example = buffers[0][0] if buffers else "blocks.0.weight"
            raise PlacementError(f"placement: {pattern!r} matches no parameter, gradient or Adam "
                                 f"state (names look like {example!r}, {example + '.grad'!r}, "
                                 f"{example + '.exp_avg'!r})")
        for n in matched:
            places.setdefault(n, place)
    for kind, spec in (("parameters", parameters), ("optimizer_state", optimizer_state),
                       ("gradients", gradients)):
        fractions = _fractions(spec, kind)
        rest = [(n, b) for n, k, b in buffers if k == kind and n not in places]
        total = sum(b for _n, b in rest)
        start = 0
        for n, b in rest:
            edge = 0.0
            for place in ("device", "host", "nvme"):
                edge += fractions.get(place, 0.0) * total
                if start < edge:
                    places[n] = place
                    break
            start += b
    return places


def _pairs(placement: Placement) -> List[Tuple[str, str]]:
    """`placement` as (pattern, place) pairs in order; PlacementError when
    it is neither a mapping nor pairs, or a pattern is not a string."""
    if placement is None:
        return []
    if isinstance(placement, Mapping):
        pairs = list(placement.items())
    elif isinstance(placement, (str, bytes)) or not isinstance(placement, Iterable):
        raise PlacementError(f"placement: {{pattern: place}} or (pattern, place) pairs, not "
                             f"{placement!r}")
    else:
        pairs = list(cast(Iterable[Tuple[str, str]], placement))
    for pair in pairs:
        if (not isinstance(pair, tuple) or len(pair) != 2
                or not isinstance(pair[0], str)):
            raise PlacementError(f"placement: each entry is (a pattern string, a place), "
                                 f"not {pair!r}")
    return pairs


def _check_place(place: str, what: str) -> None:
    if place not in PLACES:
        raise PlacementError(f"{what}: unknown place {place!r} (one of "
                           f"{', '.join(repr(p) for p in PLACES)})")


def _fractions(spec: Share, what: str) -> Dict[str, float]:
    """{place: fraction} from a place or a dict of fractions."""
    if isinstance(spec, str):
        _check_place(spec, what)
        return {spec: 1.0}
    if not isinstance(spec, dict):
        raise PlacementError(f"{what}: a place or {{place: fraction}}, not {spec!r}")
    for place, fraction in spec.items():
        _check_place(place, what)
        if not isinstance(fraction, (int, float)) or not 0.0 <= fraction <= 1.0:
            raise PlacementError(f"{what}: the fraction for {place!r} must be in [0, 1], "
                               f"not {fraction!r}")
    if sum(spec.values()) > 1.0 + 1e-9:
        raise PlacementError(f"{what}: the fractions add up to {sum(spec.values())}, above 1")
    return dict(spec)
