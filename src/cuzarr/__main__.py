"""``python -m cuzarr``: the ``cuzarr`` command line."""

from cuzarr.cli import main

raise SystemExit(main())
