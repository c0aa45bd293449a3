"""The ServerApp and what runs at the server: evaluation, the virtual clock, records."""

from threadpoolctl import threadpool_limits

from common.simulation_pickup import in_simulation_engine, shorten_pickup

# The first code of ours the simulation process runs, before its engine starts.
if in_simulation_engine():
    shorten_pickup()  # see the module
    # numpy's OpenBLAS threads stall there on small products (the engine's and Ray's threads
    # share the 2 cores): the 1,000-client Synthetic test split took minutes instead of 0.6 s.
    threadpool_limits(1, user_api="blas")
