"""The ServerApp and what runs at the server: evaluation, the virtual clock, records."""

from common.simulation_pickup import shorten_pickup

# First code of ours the simulation process runs, before its engine starts: see the module.
shorten_pickup()
