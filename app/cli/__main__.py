"""``python -m app.cli``: the ``sibyl-pg`` command."""

from app.cli.main import main

main()
