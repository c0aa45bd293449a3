"""The ClientApp and what runs on an edge device: local data and local training."""
