"""An example offbench plugin: one baseline, `linear-bc` (offbench_example_plugin/linear_bc.py)."""
