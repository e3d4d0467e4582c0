"""A small P4Runtime client: pipeline, table entries, multicast groups, packet-out and packet-in.

Enough of P4Runtime for ina's controller, on the `p4runtime` package's protobufs: one
connection as primary controller, names resolved through the P4Info.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from pathlib import Path
from typing import Iterator, Mapping

import grpc
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from ina.p4.entries import Ternary

Update = p4runtime_pb2.Update
PACKET_INS_KEPT = 65536
"""Packet-ins held for `packet_in` at most; older ones are dropped first."""


class P4RuntimeError(RuntimeError):
    """The P4Runtime server refused a request, or did not answer."""


def encode(value: int, bitwidth: int) -> bytes:
    """P4Runtime's canonical bytestring: big-endian, no leading zero bytes (at least one byte)."""
    if not 0 <= value < 1 << bitwidth:
        raise ValueError(f"{value} does not fit {bitwidth} bits")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


class P4Info:
    """Names to ids (and widths) of one program's P4Info."""

    def __init__(self, message: p4info_pb2.P4Info) -> None:
        self.message = message
        self.tables = {t.preamble.name: t for t in message.tables}
        self.actions = {a.preamble.name: a for a in message.actions}

    @classmethod
    def load(cls, path: Path) -> P4Info:
        return cls(text_format.Parse(path.read_text(), p4info_pb2.P4Info()))

    def table(self, name: str) -> p4info_pb2.Table:
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(f"the P4 program has no table {name!r}; it has {sorted(self.tables)}") from None

    def action(self, name: str, params: Mapping[str, int]) -> p4runtime_pb2.Action:
        info = self.actions[name]
        widths = {p.name: (p.id, p.bitwidth) for p in info.params}
        if set(params) != set(widths):
            raise KeyError(f"action {name} takes {sorted(widths)}, got {sorted(params)}")
        return p4runtime_pb2.Action(action_id=info.preamble.id, params=[
            p4runtime_pb2.Action.Param(param_id=widths[k][0], value=encode(v, widths[k][1])) for k, v in params.items()])  # fmt: skip

    def entry(self, table: str, match: Mapping[str, int | Ternary], action: str, params: Mapping[str, int],
              priority: int = 0) -> p4runtime_pb2.TableEntry:  # fmt: skip
        """An entry of `table` (`ina.p4.entries.TableEntry`); an empty `match` makes the table's default entry."""
        info = self.table(table)
        fields = {f.name: f for f in info.match_fields}
        entry = p4runtime_pb2.TableEntry(table_id=info.preamble.id, is_default_action=not match, priority=priority)
        for name, value in match.items():
            field = fields[name]
            if field.match_type == p4info_pb2.MatchField.TERNARY:
                ternary = value if isinstance(value, Ternary) else Ternary(value, (1 << field.bitwidth) - 1)
                entry.match.add(field_id=field.id, ternary=p4runtime_pb2.FieldMatch.Ternary(
                    value=encode(ternary.value & ternary.mask, field.bitwidth), mask=encode(ternary.mask, field.bitwidth)))  # fmt: skip
            else:
                entry.match.add(field_id=field.id, exact=p4runtime_pb2.FieldMatch.Exact(value=encode(value, field.bitwidth)))
        entry.action.action.CopyFrom(self.action(action, params))
        return entry


class P4RuntimeClient:
    """The primary controller of one device on a P4Runtime server (e.g. simple_switch_grpc)."""

    def __init__(self, address: str, device_id: int = 0, timeout: float = 10.0) -> None:
        self.device_id = device_id
        self.election_id = p4runtime_pb2.Uint128(high=0, low=1)
        self._channel = grpc.insecure_channel(address)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise P4RuntimeError(f"no P4Runtime server answers at {address} within {timeout:g} s") from None
        self._stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)
        self._outbox: queue.Queue[p4runtime_pb2.StreamMessageRequest | None] = queue.Queue()
        self._packet_ins: queue.Queue[bytes] = queue.Queue(PACKET_INS_KEPT)
        self._stream = self._stub.StreamChannel(self._requests())
        self._outbox.put(p4runtime_pb2.StreamMessageRequest(arbitration=p4runtime_pb2.MasterArbitrationUpdate(
            device_id=device_id, election_id=self.election_id)))  # fmt: skip
        reply = next(self._stream)
        if not reply.HasField("arbitration") or reply.arbitration.status.code != 0:
            self.close()
            raise P4RuntimeError(f"{address}: not made primary controller of device {device_id}: {reply}")
        self._reader = threading.Thread(target=self._drain, name="p4runtime-stream", daemon=True)
        self._reader.start()
        self.info: P4Info | None = None

    def _requests(self) -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        while (request := self._outbox.get()) is not None:
            yield request

    def _drain(self) -> None:
        """Read the stream until it closes, keeping packet-ins for `packet_in` (idle notifications are not used)."""
        try:
            for message in self._stream:
                if message.HasField("packet"):
                    self._keep(message.packet.payload)
        except grpc.RpcError:
            pass

    def _keep(self, frame: bytes) -> None:
        while True:
            try:
                self._packet_ins.put_nowait(frame)
                return
            except queue.Full:
                with contextlib.suppress(queue.Empty):
                    self._packet_ins.get_nowait()

    def set_pipeline(self, p4info: Path, pipeline: Path) -> P4Info:
        """Load a compiled program (P4Info text and the target's device config) onto the device."""
        info = P4Info.load(p4info)
        config = p4runtime_pb2.ForwardingPipelineConfig(p4info=info.message, p4_device_config=pipeline.read_bytes())
        self._call(self._stub.SetForwardingPipelineConfig, p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id, election_id=self.election_id, config=config,
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT))  # fmt: skip
        self.info = info
        return info

    def write(self, *updates: p4runtime_pb2.Update) -> None:
        """Apply updates in one atomic-as-the-target-allows batch."""
        if updates:
            self._call(self._stub.Write, p4runtime_pb2.WriteRequest(
                device_id=self.device_id, election_id=self.election_id, updates=list(updates)))  # fmt: skip

    @staticmethod
    def table_update(kind: int, entry: p4runtime_pb2.TableEntry) -> p4runtime_pb2.Update:
        return p4runtime_pb2.Update(type=kind, entity=p4runtime_pb2.Entity(table_entry=entry))

    @staticmethod
    def group_update(kind: int, group: int, replicas: list[tuple[int, int]]) -> p4runtime_pb2.Update:
        """A multicast group of (egress port, replica id) pairs."""
        entry = p4runtime_pb2.MulticastGroupEntry(multicast_group_id=group, replicas=[
            p4runtime_pb2.Replica(egress_port=port, instance=rid) for port, rid in replicas])  # fmt: skip
        return p4runtime_pb2.Update(type=kind, entity=p4runtime_pb2.Entity(
            packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(multicast_group_entry=entry)))  # fmt: skip

    def packet_out(self, frame: bytes) -> None:
        """Inject `frame` at the device's CPU port."""
        self._outbox.put(p4runtime_pb2.StreamMessageRequest(packet=p4runtime_pb2.PacketOut(payload=frame)))

    def packet_in(self, timeout: float) -> bytes:
        """The next frame the device sent to its CPU port; P4RuntimeError when none comes within `timeout` seconds."""
        try:
            return self._packet_ins.get(timeout=timeout)
        except queue.Empty:
            raise P4RuntimeError(f"no packet-in within {timeout:g} s") from None

    def _call(self, method, request) -> None:  # type: ignore[no-untyped-def]
        try:
            method(request, timeout=30)
        except grpc.RpcError as error:
            raise P4RuntimeError(f"P4Runtime {type(request).__name__}: {error.code().name}: {error.details()}") from None

    def close(self) -> None:
        self._outbox.put(None)
        self._channel.close()


INSERT, MODIFY, DELETE = Update.INSERT, Update.MODIFY, Update.DELETE
