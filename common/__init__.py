"""Pieces shared by the ServerApp and the ClientApp: settings, data, models, parameter vectors."""
