"""Per-client compression maths, used on both sides: Top-k selection, compressors, error
feedback and the compression gain.

``COMPRESSORS`` is the table of compressors by setting name (``compressor = ...``): adding one
is one module and one line here.
"""

from __future__ import annotations

from compress.base import Compressor
from compress.topk import TopK
from compress.topk_q8 import TopKQ8

COMPRESSORS: dict[str, Compressor] = {c.name: c for c in (TopK(), TopKQ8())}
