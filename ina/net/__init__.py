"""Packet I/O shared by the switch, the PS and the workers: the sans-IO node interface."""
