"""One module per command group; each exposes ``register(subparsers)``."""
