"""Per-client compression maths, used on both sides: selectors (which coordinates a client
sends), encodings (how their values travel), error feedback and the compression gain.

``SELECTORS`` and ``ENCODINGS`` are the tables of the ``selector`` and ``encoding`` settings:
adding one is one module and one line here.
"""

from __future__ import annotations

from compress.base import Encoding, Selector
from compress.float32 import Float32
from compress.int8 import Int8
from compress.qsgd import Qsgd
from compress.randomk import RandomK
from compress.sign import ScaledSign
from compress.topk import TopK

SELECTORS: dict[str, Selector] = {s.name: s for s in (TopK(), RandomK())}
ENCODINGS: dict[str, type[Encoding]] = {e.name: e for e in (Float32, Int8, ScaledSign, Qsgd)}
