"""The Django app: imports every app's tasks module and keeps awa's schema migrated."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AwaConfig(AppConfig):
    """``awa.contrib.django`` (label ``awa``)."""

    name = "awa.contrib.django"
    label = "awa"
    verbose_name = "awa job queue"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from awa.contrib.django import conf

        autodiscover_modules(conf.current().tasks_module)
        post_migrate.connect(_apply_pending, sender=self, dispatch_uid="awa-schema")


def _apply_pending(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """After ``migrate``, apply awa migrations shipped by a newer awa than the one that
    ran ``0001_awa_schema`` (a no-op check when the schema is current)."""
    from awa.contrib.django.schema import migrate

    migrate(using)
