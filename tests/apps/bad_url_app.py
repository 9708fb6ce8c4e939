"""A client built with a malformed URL of its own (a typo): ``awa worker`` must blame the
module, not an unrelated ``DATABASE_URL`` the application keeps for another database."""

from __future__ import annotations

import awa

client = awa.AsyncClient("postgresql//postgres@127.0.0.1:5432/app")
