"""EdgeStrategy and its parts: collectives (both halves of each exchange; a ClientApp loads
only these), policies, the ledger, replicas and the injection relay."""
