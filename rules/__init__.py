"""Built-in gpuadvisor rules: one rule per file (GAnnn_name.py). Shipped in the wheel as
`gpuadvisor.builtin_rules`; loaded by file path by gpuadvisor.engine, the same way a user's
`--rules DIR` folder is loaded."""
