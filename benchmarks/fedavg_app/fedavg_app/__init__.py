"""A minimal Flower FedAvg app on edgeflex's dense workload (see pyproject.toml)."""
