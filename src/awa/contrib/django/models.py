"""No models: awa's tables live in its own schema, migrated by awa's migrator.

The module exists because Django sends ``post_migrate`` only to apps that have one, and
the app's receiver (``apps._apply_pending``) applies newer awa migrations after every
``manage.py migrate``.
"""
