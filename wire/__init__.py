"""What travels between the ServerApp and the ClientApps, owned by both sides.

Imports only flwr and numpy: a device's ClientApp loads it on every message.
"""
