"""Errors a user can act on: each message names the problem and the fix."""


class PfedkitError(Exception):
    """Base class: the CLI prints these without a traceback."""


class ConfigError(PfedkitError):
    """A configuration key or value is wrong; raised before any training starts."""


class DataError(PfedkitError):
    """A data file is missing, corrupt, or a partition cannot be built."""
