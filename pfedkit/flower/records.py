"""Payloads and replies (flat dicts of tensors and plain numbers) as Flower records and back, for any method.

Tensors go in one ArrayRecord, plain numbers in one ConfigRecord, and the key order in a third record, so the
dict that comes out equals the one that went in: same keys in the same order, dtypes, shapes, values, types.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from pfedkit.errors import PfedkitError
from pfedkit.records import State

TENSORS, VALUES, ORDER = "pfedkit.tensors", "pfedkit.values", "pfedkit.order"
PLAIN = (bool, int, float, str)


def to_records(message: State, into: RecordDict | None = None) -> RecordDict:
    """Add `message` to `into` (a new RecordDict when None) as three records."""
    tensors, values = ArrayRecord(), ConfigRecord()
    for key, value in message.items():
        if isinstance(value, torch.Tensor):
            if value.dtype == torch.bfloat16 or value.is_complex():  # no lossless NumPy form for these
                raise PfedkitError(
                    f"message entry {key!r} has dtype {value.dtype}, which Flower records cannot carry; "
                    "send it as float32"
                )
            tensors[key] = Array(value.detach().cpu().contiguous().numpy())
        elif isinstance(value, PLAIN):
            values[key] = value
        else:
            raise PfedkitError(
                f"message entry {key!r} is a {type(value).__name__}; payloads and replies hold only "
                "tensors and plain numbers (bool, int, float, str)"
            )
    records = RecordDict() if into is None else into
    records[TENSORS], records[VALUES] = tensors, values
    records[ORDER] = ConfigRecord({"keys": list(message)})
    return records


def from_records(records: RecordDict) -> State:
    """The message that `to_records` wrote."""
    tensors, values = records.array_records[TENSORS], records.config_records[VALUES]
    out: dict[str, Any] = {}
    for key in records.config_records[ORDER]["keys"]:
        if key in tensors:
            out[key] = torch.from_numpy(np.array(tensors[key].numpy(), copy=True))
        else:
            out[key] = values[key]
    return out
