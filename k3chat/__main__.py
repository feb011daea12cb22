"""`python -m k3chat` is the `k3chat` command."""

from k3chat.cli import main

raise SystemExit(main())
