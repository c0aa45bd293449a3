"""State on disk: every stateful part of a run declares its state (``state_dict`` and
``load_state_dict``, as PyTorch's modules do), and one file format holds it.

- ``files.py``: the one atomic write.
- ``archive.py``: the one format, a zip of ``.npy`` arrays (read without pickle) and a JSON
  manifest, each part with its schema version.
- ``fields.py``: reading a part's state back, checked field by field.
- ``vectors.py``: where a client keeps its vectors (its ``context.state``, or the store).
- ``store.py``: simulated clients' vectors on disk between rounds.
"""
