"""Asynchronous env pools: ``AsyncEnvPool`` and its threading / multiprocessing back-ends."""

from ._pool import AsyncEnvPool
from ._processes import ProcessorAsyncEnvPool
from ._threading import ThreadingAsyncEnvPool

__all__ = ["AsyncEnvPool", "ProcessorAsyncEnvPool", "ThreadingAsyncEnvPool"]
