"""`python -m ina.ps`: the parameter server without the `ina` CLI."""

import sys

from ina.ps.cli import main

sys.exit(main())
