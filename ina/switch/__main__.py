"""`python -m ina.switch`: the switch without the `ina` CLI."""

import sys

from ina.switch.cli import main

sys.exit(main())
