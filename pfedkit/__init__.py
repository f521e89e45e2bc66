"""pfedkit: personalized federated learning, faithful methods over one round loop."""

__version__ = "0.1.0"
