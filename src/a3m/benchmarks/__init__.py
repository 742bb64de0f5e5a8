"""Benchmark and chaos workloads: A3M and its peers (raw UDP, pyzmq, pynng) measured in the
same run, each side in its own process. Used by ``a3m bench`` and ``a3m chaos``."""
