"""An object's state as data: a JSON tree plus named arrays, read back onto a fresh build.

Checkpoints must not run code when they are read, so they are not pickles. ``dump_state``
walks an object graph (our own classes, containers, numbers, strings, NumPy arrays and random
generators, torch modules) into a JSON-able tree and a table of arrays. ``load_state`` rebuilds
that graph beside a *fresh* object (the same thing built from the same settings):

- Data comes from the file. Instances are made only of classes defined in edgeflex's own
  packages (``STATE_PACKAGES``), without calling their constructors, and filled field by field.
- Code never comes from the file. Every function, method or class an object holds is written
  as ``$fresh`` and taken from the fresh build at the same place; a method of a fresh object is
  bound again to the object rebuilt in its place. Torch modules are the fresh build's, with
  their tensors loaded from the file.
- Shared references stay shared (``$id`` / ``$ref``), as in the running program.

Anything else (an unknown type, a ``$fresh`` with nothing in its place, an array of objects) is
a ``StateError`` naming where it is.
"""

from __future__ import annotations

import functools
import importlib
import math
import operator
import types
from collections import deque
from collections.abc import Callable
from enum import Enum
from pathlib import PurePath
from typing import Any, cast

import numpy as np
import torch
from torch import nn

# Top-level packages whose classes a state file may instantiate.
STATE_PACKAGES = frozenset(
    {"common", "wire", "compress", "timing", "strategies", "server", "client"}
)
BIT_GENERATORS = {
    "PCG64": np.random.PCG64,
    "PCG64DXSM": np.random.PCG64DXSM,
    "Philox": np.random.Philox,
    "SFC64": np.random.SFC64,
    "MT19937": np.random.MT19937,
}
SCALAR_KINDS = frozenset("biuf")  # NumPy scalars a state holds: booleans, integers, floats
_MISSING = object()
Json = Any


class StateError(ValueError):
    """A state tree that cannot be written or read back; the message names where."""


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _own_class(path: str, where: str) -> type:
    module_name, _, qualname = path.partition(":")
    if module_name.split(".")[0] not in STATE_PACKAGES or not qualname:
        raise StateError(f"{where}: {path!r} is not a class of edgeflex's own packages")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise StateError(f"{where}: no class {path!r} in this edgeflex") from exc
    # The name must be the class's own: a path through a module's globals (``common.x:torch.
    # hub.tempfile.SomeClass``) would otherwise reach any class those modules can see.
    own = isinstance(found, type) and (found.__module__, found.__qualname__) == (
        module_name,
        qualname,
    )
    if not own:
        raise StateError(f"{where}: {path!r} is not a class defined in {module_name!r}")
    return found


def _is_code(value: Any) -> bool:
    """Functions, methods and classes: never read from a file. (An object with ``__call__``
    is data like any other; a built-in bound to an object, which could not be bound again to
    the object rebuilt in its place, is neither and cannot be written.)"""
    if isinstance(value, types.BuiltinFunctionType):
        return value.__self__ is None or isinstance(value.__self__, types.ModuleType)
    return isinstance(value, (type, types.FunctionType, types.MethodType, functools.partial))


class _Writer:
    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.ids: dict[int, int] = {}
        self.keep: list[Any] = []  # keeps walked objects alive so their ids stay unique

    def array(self, value: np.ndarray, where: str) -> str:
        if value.dtype.hasobject:
            raise StateError(f"{where}: an array of Python objects cannot be written as data")
        key = f"a{len(self.arrays)}"
        self.arrays[key] = value
        return key

    def shared(self, value: Any) -> tuple[int, bool]:
        """The value's id in the tree, and whether it was written before."""
        if id(value) in self.ids:
            return self.ids[id(value)], True
        self.ids[id(value)] = len(self.ids)
        self.keep.append(value)
        return self.ids[id(value)], False

    def write(self, value: Any, where: str) -> Json:  # noqa: C901 (one case per kind of value)
        if isinstance(value, np.generic):
            return {"$scalar": value.dtype.str, "value": self.write(value.item(), where)}
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int) and not isinstance(value, Enum):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"$float": repr(value)}
        if isinstance(value, Enum):
            return {"$enum": _class_path(type(value)), "name": value.name}
        if isinstance(value, PurePath):
            return {"$path": str(value)}
        if isinstance(value, tuple):
            items = [self.write(v, f"{where}[{i}]") for i, v in enumerate(value)]
            if type(value) is tuple:
                return {"$tuple": items}
            return {"$namedtuple": self.own(type(value), where), "items": items}
        if isinstance(value, frozenset):
            return {"$frozenset": [self.write(v, f"{where}{{}}") for v in sorted(value, key=repr)]}
        if _is_code(value):
            return {"$fresh": True}
        ref, seen = self.shared(value)
        if seen:
            return {"$ref": ref}
        if isinstance(value, np.ndarray):
            return {"$id": ref, "$array": self.array(value, where)}
        if isinstance(value, torch.Tensor):
            return {"$id": ref, "$tensor": self.array(value.detach().cpu().numpy(), where)}
        if isinstance(value, nn.Module):
            tensors = {k: self.write(v, f"{where}.{k}") for k, v in value.state_dict().items()}
            return {"$id": ref, "$module": tensors}
        if isinstance(value, np.random.Generator):
            name = type(value.bit_generator).__name__
            state = self.write(value.bit_generator.state, f"{where}.state")
            return {"$id": ref, "$generator": name, "state": state}
        if isinstance(value, list):
            return {
                "$id": ref,
                "$list": [self.write(v, f"{where}[{i}]") for i, v in enumerate(value)],
            }
        if isinstance(value, deque):
            items = [self.write(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return {"$id": ref, "$deque": items, "maxlen": value.maxlen}
        if isinstance(value, set):
            return {
                "$id": ref,
                "$set": [self.write(v, f"{where}{{}}") for v in sorted(value, key=repr)],
            }
        if type(value) is dict:
            items = [
                [self.write(k, where), self.write(v, f"{where}[{k!r}]")] for k, v in value.items()
            ]
            return {"$id": ref, "$dict": items}
        path = self.own(type(value), where)
        fields = {name: self.write(v, f"{where}.{name}") for name, v in _fields(value).items()}
        return {"$id": ref, "$object": path, "fields": fields}

    @staticmethod
    def own(cls: type, where: str) -> str:
        if cls.__module__.split(".")[0] not in STATE_PACKAGES:
            raise StateError(f"{where}: a {_class_path(cls)} cannot be written as data")
        return _class_path(cls)


def _fields(value: Any) -> dict[str, Any]:
    """An object's fields, or what its own ``__getstate__`` says to keep."""
    if type(value).__getstate__ is not object.__getstate__:
        return dict(value.__getstate__())
    fields = dict(getattr(value, "__dict__", {}))
    for cls in type(value).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                fields[name] = getattr(value, name)
    return fields


def dump_state(value: Any) -> tuple[Json, dict[str, np.ndarray]]:
    """``value``'s state: a JSON-able tree and the arrays it names."""
    writer = _Writer()
    return writer.write(value, "state"), writer.arrays


class _Reader:
    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        self.objects: dict[int, Any] = {}
        self.rebuilt: dict[int, Any] = {}  # id(fresh object) -> the object rebuilt in its place
        # where a fresh bound method was placed: re-bound once every object is rebuilt
        self.methods: list[tuple[Callable[[Any], None], types.MethodType]] = []

    def place(self, value: Any, assign: Callable[[Any], None]) -> None:
        if isinstance(value, types.MethodType):
            self.methods.append((assign, value))

    def array(self, key: Any, where: str) -> np.ndarray:
        if not isinstance(key, str) or key not in self.arrays:
            raise StateError(f"{where}: names an array the file does not hold ({key!r})")
        return self.arrays[key]

    def read(self, node: Json, fresh: Any, where: str) -> Any:  # noqa: C901 (one case per kind)
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if not isinstance(node, dict):
            raise StateError(f"{where}: a {type(node).__name__} is not a state node")
        if "$fresh" in node:
            if fresh is _MISSING or not _is_code(fresh):
                raise StateError(f"{where}: the file expects code here and this build has none")
            return fresh
        if "$ref" in node:
            if node["$ref"] not in self.objects:
                raise StateError(f"{where}: refers to object {node['$ref']!r} before it is read")
            return self.objects[node["$ref"]]
        if "$float" in node:
            if node["$float"] not in ("nan", "inf", "-inf"):
                raise StateError(f"{where}: {node['$float']!r} is not a float")
            return float(node["$float"])
        if "$scalar" in node:
            dtype = np.dtype(node["$scalar"])
            if dtype.kind not in SCALAR_KINDS:
                raise StateError(f"{where}: a scalar of dtype {dtype} is not a number")
            return dtype.type(self.read(node["value"], _MISSING, where))
        if "$enum" in node:
            cls = _own_class(node["$enum"], where)
            if not issubclass(cls, Enum) or node.get("name") not in cls.__members__:
                raise StateError(f"{where}: {node.get('name')!r} is not a {node['$enum']}")
            return cls[node["name"]]
        if "$path" in node:
            return (
                type(fresh)(node["$path"])
                if isinstance(fresh, PurePath)
                else PurePath(node["$path"])
            )
        if "$tuple" in node:
            return tuple(self._items(node["$tuple"], fresh, where))
        if "$namedtuple" in node:
            cls = _own_class(node["$namedtuple"], where)
            if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
                raise StateError(f"{where}: {node['$namedtuple']!r} is not a named tuple")
            return cls(*self._items(node.get("items"), fresh, where))
        if "$frozenset" in node:
            return frozenset(self._items(node["$frozenset"], _MISSING, where))
        ref = node.get("$id")
        if not isinstance(ref, int) or ref in self.objects:
            raise StateError(f"{where}: object id {ref!r} is missing or used twice")
        return self._shared(node, ref, fresh, where)

    def _items(self, items: Any, fresh: Any, where: str) -> list[Any]:
        if not isinstance(items, list):
            raise StateError(f"{where}: items are not a list")
        counterparts = list(fresh) if isinstance(fresh, (list, tuple, deque)) else []
        return [
            self.read(v, counterparts[i] if i < len(counterparts) else _MISSING, f"{where}[{i}]")
            for i, v in enumerate(items)
        ]

    def _shared(self, node: dict[str, Any], ref: int, fresh: Any, where: str) -> Any:  # noqa: C901
        if "$array" in node:
            value: Any = self.array(node["$array"], where)
        elif "$tensor" in node:
            value = torch.from_numpy(self.array(node["$tensor"], where).copy())
        elif "$module" in node:
            if not isinstance(fresh, nn.Module):
                raise StateError(f"{where}: the file holds a module and this build has none here")
            tensors = node["$module"]
            if not isinstance(tensors, dict):
                raise StateError(f"{where}: a module's tensors are not a table")
            state = {k: self.read(v, _MISSING, f"{where}.{k}") for k, v in tensors.items()}
            try:
                fresh.load_state_dict(state, strict=True)
            except (RuntimeError, TypeError) as exc:
                raise StateError(f"{where}: {exc}") from exc
            value = fresh
        elif "$generator" in node:
            bit_generator = BIT_GENERATORS.get(node["$generator"])
            if bit_generator is None:
                raise StateError(f"{where}: no bit generator {node['$generator']!r}")
            value = np.random.Generator(bit_generator())
            try:
                value.bit_generator.state = self.read(node.get("state"), _MISSING, f"{where}.state")
            except (TypeError, ValueError, KeyError) as exc:
                raise StateError(f"{where}: not a {node['$generator']} state ({exc})") from exc
        elif "$list" in node:
            value = []
            self.objects[ref] = value
            value.extend(self._items(node["$list"], fresh, where))
            for i, item in enumerate(value):
                self.place(item, functools.partial(operator.setitem, value, i))
        elif "$deque" in node:
            maxlen = node.get("maxlen")
            if maxlen is not None and (not isinstance(maxlen, int) or maxlen < 0):
                raise StateError(f"{where}: deque maxlen {maxlen!r}")
            value = deque(maxlen=maxlen)
            self.objects[ref] = value
            value.extend(self._items(node["$deque"], fresh, where))
        elif "$set" in node:
            value = set()
            self.objects[ref] = value
            value.update(self._items(node["$set"], _MISSING, where))
        elif "$dict" in node:
            value = {}
            self.objects[ref] = value
            self._fill_dict(value, node["$dict"], fresh, where)
        elif "$object" in node:
            value = self._object(node, ref, fresh, where)
        else:
            raise StateError(f"{where}: a node of unknown kind ({sorted(node)})")
        self.objects[ref] = value
        return value

    def _fill_dict(self, value: dict[Any, Any], items: Any, fresh: Any, where: str) -> None:
        if not isinstance(items, list):
            raise StateError(f"{where}: a table's items are not a list")
        for item in items:
            if not isinstance(item, list) or len(item) != 2:
                raise StateError(f"{where}: a table item is not a key and a value")
            key = self.read(item[0], _MISSING, where)
            try:
                counterpart = fresh.get(key, _MISSING) if isinstance(fresh, dict) else _MISSING
            except TypeError as exc:
                raise StateError(f"{where}: key {key!r} cannot key a table") from exc
            value[key] = self.read(item[1], counterpart, f"{where}[{key!r}]")
            self.place(value[key], functools.partial(operator.setitem, value, key))

    def _object(self, node: dict[str, Any], ref: int, fresh: Any, where: str) -> Any:
        cls = _own_class(node["$object"], where)
        value = cast(Any, cls).__new__(cls)  # no constructor runs
        self.objects[ref] = value
        if type(fresh) is cls:
            self.rebuilt[id(fresh)] = value
        fields = node.get("fields")
        if not isinstance(fields, dict):
            raise StateError(f"{where}: an object's fields are not a table")
        for name, field in fields.items():
            counterpart = getattr(fresh, name, _MISSING) if type(fresh) is cls else _MISSING
            read = self.read(field, counterpart, f"{where}.{name}")
            object.__setattr__(value, name, read)
            self.place(read, functools.partial(object.__setattr__, value, name))
        return value

    def bind_methods(self) -> None:
        """Methods of the fresh build's objects, bound again to the objects rebuilt for them."""
        for assign, method in self.methods:
            owner = self.rebuilt.get(id(method.__self__))
            if owner is not None:
                assign(types.MethodType(method.__func__, owner))


def load_state(tree: Json, arrays: dict[str, np.ndarray], fresh: Any) -> Any:
    """The object graph ``tree`` describes, its code and modules taken from ``fresh``."""
    reader = _Reader(arrays)
    try:
        value = reader.read(tree, fresh, "state")
    except StateError:
        raise
    except Exception as exc:  # a file may hold anything: whatever it breaks is its fault
        what = f"{type(exc).__name__}: {exc}"[:300]
        raise StateError(f"state: not a state this build can read ({what})") from exc
    reader.bind_methods()
    return value
