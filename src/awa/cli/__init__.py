"""The ``awa`` command line. Uses only awa's public API."""
