"""A digest of each node's settings, kept in a work directory's ``deploy.json``.

A rerun of a work directory resumes the old deploy's checkpoints, state and outputs; with other
settings (a topology parameter, an output path, another window) it would mix the two, or wait
for outputs that are never written. :func:`node_settings` pictures each node as plain data
(:func:`picture`) and hashes it, so that ``epic deploy`` can refuse such a rerun, naming the
nodes that differ (docs/deploy.md, "One deploy per work directory").

The picture is the same in every process for the same topology file and parameters (no memory
addresses, no hash-seed order): numbers, text, schemas; dataclasses by their fields; functions
by their name, their code (bytecode and constants), their defaults, the values their closures
hold and the plain values of the globals they name (a module-level parameter used in a lambda);
``functools.partial`` by its function and arguments; numpy arrays by a hash of their bytes;
other objects by their public attributes. A path is taken absolute (``out/x`` and ``./out/x``
are the same). ``replay_speed`` (pacing only) is left out: a paced deploy may resume at another
speed.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import os
import types
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pyarrow as pa

__all__ = ["node_settings", "picture"]

#: fields left out of a dataclass's picture: the graph's wiring (pictured apart), a topology's
#: object id, and settings that change how fast, not what
_SKIP = frozenset({"outputs", "owner", "replay_speed"})

#: fields whose text is a local path (taken absolute)
_PATHS = frozenset({"path", "dead_letter", "late_file", "input", "out", "dir", "directory", "source"})

_DEPTH = 8


def node_settings(topology) -> dict[str, str]:
    """Per node of ``topology``, a digest (16 hex digits) of its settings, inputs and output
    schemas."""
    out = {}
    for n in topology.topological_order():
        pic = {"node": picture(n), "inputs": [f"{s.node}:{s.port}" for s in n.inputs],
               "outputs": [str(s.schema) for s in n.outputs]}
        out[n.name] = hashlib.sha1(json.dumps(pic, sort_keys=True).encode()).hexdigest()[:16]
    return out


def picture(v, depth: int = 0, path: frozenset = frozenset()):
    """``v`` as deterministic JSON-able data (see the module doc)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (Fraction, Decimal, timedelta, enum.Enum)):
        return repr(v)
    if isinstance(v, np.generic):
        return repr(v.item())
    if isinstance(v, os.PathLike):
        return _abspath(os.fspath(v))
    if isinstance(v, (pa.Schema, pa.DataType, pa.Field)):
        return str(v)
    if isinstance(v, np.ndarray):
        a = np.ascontiguousarray(v)
        digest = hashlib.sha1(a.view(np.uint8).tobytes() if a.dtype != object
                              else repr(a.tolist()).encode()).hexdigest()[:16]
        return {"array": str(a.dtype), "shape": list(a.shape), "sha1": digest}
    if isinstance(v, (types.ModuleType, type)):
        return f"{getattr(v, '__module__', '')}.{getattr(v, '__qualname__', v.__name__)}"
    if depth > _DEPTH or id(v) in path:
        return type(v).__qualname__
    path = path | {id(v)}
    deeper = functools.partial(picture, depth=depth + 1, path=path)
    if isinstance(v, (list, tuple)):
        if len(v) > 64:   # an iterator source's items: their number and first ones
            return {"len": len(v), "head": [deeper(x) for x in v[:8]]}
        return [deeper(x) for x in v]
    if isinstance(v, dict):
        items = [(json.dumps(deeper(k), sort_keys=True), deeper(x)) for k, x in v.items()]
        return dict(sorted(items))
    if isinstance(v, (set, frozenset)):
        return sorted((deeper(x) for x in v), key=lambda x: json.dumps(x, sort_keys=True))
    if isinstance(v, functools.partial):
        return {"partial": deeper(v.func), "args": deeper(v.args),
                "keywords": deeper(dict(v.keywords))}
    if isinstance(v, types.MethodType):
        return {"method": v.__func__.__qualname__, "self": deeper(v.__self__)}
    if isinstance(v, types.FunctionType):
        return _function(v, deeper)
    if isinstance(v, types.CodeType):
        return _code(v)
    if dataclasses.is_dataclass(v):
        return {"_": type(v).__qualname__,
                **{f.name: _field(f.name, getattr(v, f.name, None), deeper)
                   for f in dataclasses.fields(v) if f.name not in _SKIP}}
    attrs = getattr(v, "__dict__", None)
    if isinstance(attrs, dict):
        return {"_": type(v).__qualname__,
                **{k: _field(k, x, deeper) for k, x in sorted(attrs.items())
                   if not k.startswith("_")}}
    return type(v).__qualname__


def _field(name: str, value, deeper):
    if name in _PATHS and isinstance(value, str):
        return _abspath(value)
    return deeper(value)


def _abspath(p: str) -> str:
    return p if "://" in p or not p else os.path.abspath(p)


def _function(fn: types.FunctionType, deeper) -> dict:
    code = fn.__code__
    g = fn.__globals__
    used = {}
    for name in code.co_names:
        if name in g and _is_data(g[name]):
            used[name] = deeper(g[name])
    return {"fn": f"{fn.__module__}.{fn.__qualname__}", "code": _code(code),
            "defaults": deeper(fn.__defaults__), "kwdefaults": deeper(fn.__kwdefaults__),
            "closure": [deeper(_cell(c)) for c in fn.__closure__ or ()], "globals": used}


def _cell(c):
    try:
        return c.cell_contents
    except ValueError:   # an empty cell
        return None


def _is_data(x) -> bool:
    """A global whose value is a setting (a module-level parameter), not code or a module."""
    return not isinstance(x, (types.ModuleType, type, types.FunctionType,
                              types.BuiltinFunctionType, functools.partial))


def _code(code: types.CodeType) -> str:
    h = hashlib.sha1(code.co_code)
    h.update(json.dumps(code.co_names).encode())
    for c in code.co_consts:
        h.update(_const(c).encode())
    return h.hexdigest()[:16]


def _const(c) -> str:
    if isinstance(c, types.CodeType):
        return _code(c)
    if isinstance(c, frozenset):   # `x in {"a", "b"}`: its order follows the hash seed
        return "frozenset(" + repr(sorted(_const(x) for x in c)) + ")"
    if isinstance(c, tuple):
        return "(" + ",".join(_const(x) for x in c) + ")"
    return repr(c)
