"""The worker runtime: dispatch → permits → rate limit → claim → execute → complete.

``runtime`` wires the pieces; each module here owns one step of that flow.
"""
