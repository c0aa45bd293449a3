"""Server-side policies, each a small object or function of what was observed, in tables:
the compression ratio (``ratio``), the collective (``collective``), aggregation weights
(``weights``) and learning-rate scaling (``lr``)."""
