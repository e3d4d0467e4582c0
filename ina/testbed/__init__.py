"""The Mininet testbed: DDP jobs on an emulated network, through BMv2 or the software switch.

``ina testbed RUN.yaml`` (as root) builds a Mininet network without Open vSwitch (worker hosts,
a PS host and one switch node, on shaped links), starts ``ina switch`` (software or
``--target bmv2``) and ``ina ps`` in their hosts, runs the run file's jobs as real training
processes in the worker hosts, writes what they measured and removes everything it created.

One module per concern: :mod:`ina.testbed.spec` (the run file and its validation),
:mod:`ina.testbed.network` (the Mininet network and its cleanup), :mod:`ina.testbed.processes`
(processes in hosts), :mod:`ina.testbed.worker` (one training process), :mod:`ina.testbed.results`
(CSV, JSON and plots), :mod:`ina.testbed.orchestrate` (a run from start to end) and
:mod:`ina.testbed.cli` (the subcommand). testbed/README.md says how to use it.
"""
