"""The ServerApp and what runs at the server: evaluation, the virtual clock, records."""
