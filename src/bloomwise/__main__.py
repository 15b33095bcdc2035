"""`python -m bloomwise`: the same as the `bloomwise` command."""
import sys

from bloomwise.cli import main

sys.exit(main())
