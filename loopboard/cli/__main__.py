"""`python -m loopboard.cli`: the same as the `loopboard` command."""

from loopboard.cli import main

raise SystemExit(main())
