"""The kit's driver: render, validate, launch and stop Ray clusters (see README.md)."""
