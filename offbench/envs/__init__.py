"""Benchmark environments that no package ships, and the factory that rebuilds any card's environment."""
