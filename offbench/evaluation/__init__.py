"""Evaluation protocols: policy rollouts in a dataset's environment, scored as the card defines."""
