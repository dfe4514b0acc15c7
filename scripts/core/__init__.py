"""The bottom layer, which imports nothing else of the kit: errors, paths, inputs (Make
variables), values (strict YAML + schema), state (launched records), ray_cli, submit."""
