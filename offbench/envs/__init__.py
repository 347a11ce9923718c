"""Benchmark environments that no package ships, and the factory that rebuilds any card's environment.

Importing this package registers the in-context RL benchmarks with Gymnasium (`offbench/DarkRoom-v0`, ...)
and the "offbench" suite with the factory (see benchmarks.py).
"""

from offbench.envs.benchmarks import register_gymnasium_ids

register_gymnasium_ids()
