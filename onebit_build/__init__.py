"""onebit-build: one reproducible command from pinned sources to a smoke-tested llama-server."""

__version__ = "0.1.0"
