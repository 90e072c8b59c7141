"""`python -m auditor` runs the CLI."""

from __future__ import annotations

import sys

from auditor.cli import main

sys.exit(main())
