"""Agents that act without offline training (language models): they play under the same protocols as the baselines."""
