"""The P4 sources of the switch (docs/p4.md), installed as the package data `ina.p4src` so that `ina p4 build` finds them."""
