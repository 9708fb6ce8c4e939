"""Integrations with frameworks: ``awa.contrib.django`` and ``awa.contrib.starlette``
(FastAPI too). Each needs its framework installed (``awa[django]``, ``awa[fastapi]``)."""
