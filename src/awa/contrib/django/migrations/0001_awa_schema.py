"""awa's tables (schema ``awa``), applied by awa's own migrator; later awa versions'
migrations are applied after every ``migrate`` (see ``apps.AwaConfig``)."""

from typing import Any, ClassVar

from django.db import migrations

from awa.contrib.django.schema import apply


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [
        migrations.RunPython(apply, migrations.RunPython.noop, elidable=False)
    ]
