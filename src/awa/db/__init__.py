"""Database access: connections, SQL loading, row decoding, migrations, error mapping.

Nothing here imports the worker, the CLI or the dashboard.
"""
