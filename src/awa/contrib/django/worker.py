"""``awa.contrib.django.worker:client`` — what ``manage.py awa_worker`` hands to ``awa worker``.

Importing it sets Django up first (``DJANGO_SETTINGS_MODULE`` must be set, as
``manage.py`` does), so a process that imports only this module — a child of
``awa worker --processes`` — runs the same tasks as the one that started it.
"""

from __future__ import annotations

import django
from django.apps import apps

if not apps.ready:
    django.setup()

from awa.contrib.django import get_client

client = get_client()
