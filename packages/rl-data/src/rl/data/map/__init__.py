"""rl.data.map: hash and query modules for tensor-keyed maps (TorchRL's ``torchrl.data.map``)."""

from rl.data.map.hash import BinaryToDecimal, RandomProjectionHash, SipHash
from rl.data.map.query import HashToInt, QueryModule
from rl.data.map.tdstorage import TensorDictMap, TensorMap

__all__ = [
    "BinaryToDecimal",
    "HashToInt",
    "QueryModule",
    "RandomProjectionHash",
    "SipHash",
    "TensorDictMap",
    "TensorMap",
]
