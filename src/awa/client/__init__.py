"""Producing and administering jobs: the async core client, its sync twin, transactions."""
