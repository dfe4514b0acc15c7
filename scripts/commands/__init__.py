"""The CLI's commands, one module per group; scripts/kit.py dispatches to them."""
