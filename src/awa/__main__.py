"""``python -m awa`` is the ``awa`` command."""

from awa.cli.main import main

raise SystemExit(main())
