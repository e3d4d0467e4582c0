"""The emulated network: Mininet hosts and links, no Open vSwitch, no controller.

Every node is a plain Mininet ``Host`` (a shell in a network namespace of its own): the worker
hosts, the PS host and the switch node. Each worker host and the PS host has one link to the
switch node, shaped by Mininet's ``TCLink`` (bandwidth: HTB) and, for loss, duplication and
reordering, by nftables ``netdev`` egress rules on both ends of the link (this works on kernels
without ``sch_netem``, which TCLink's loss and delay need; delay still needs it): a reordered
packet is marked for a slow HTB class that sends only when the link's other classes are empty.
What forwards in the switch node is chosen by the run file:

- ``software``: a Linux bridge joins the switch node's ports (the workers' own TCP, ARP) and
  carries the switch's address, where ``ina switch`` listens;
- ``bmv2``: BMv2 owns the ports (``ina switch --target bmv2 --interface ...``); its control API
  listens on a separate, unshaped management network (a second link from each worker host).

A racked run (``topology.racks``) has a switch node per rack, its **leaf**, and one **spine** at the
switch's address: each worker host's link goes to its rack's leaf, each leaf has one uplink to the
spine (shaped as ``topology.uplink`` says, each way; both of its ends are switch ports, with egress
queues) and the PS host's link goes to the spine. The data network is a tree. With the software
switch every switch node bridges all its ports and carries its own address, so the whole network is
one L2 subnet, a tree of bridges: a worker reaches its leaf, the spine and the PS (whose results to
workers cross the uplinks, as in a real rack) by address alone. With BMv2 each switch node's BMv2
owns its ports and is told, for every address of the network, the port that leads to it (a leaf:
its rack's hosts on their ports, everything else up its uplink; the spine: the PS on its port, each
rack's hosts and leaf down that rack's uplink); the management network joins every worker host and
every leaf to the spine node, where the spine's control API listens.

All veth pairs are created between two namespaces, never in the root namespace, and the node
names carry a tag unique to the run, so nothing of another run or of the machine is touched.
Closing stops the nodes' shells: their namespaces, and with them every interface, disappear.
Mininet's global cleanup (``mn -c``) is never used, and Mininet's start-up tuning of machine-wide
limits and sysctls is skipped.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Iterator, Optional

from ina.net.impair import chain_name, egress_rules, rule_counters
from ina.protocol.constants import EGRESS_QUEUES, FLAGS_OFFSET, KIND_OFFSET, MAGIC, PRIORITY_OFFSET, Flag, Kind
from ina.testbed.spec import Link as LinkSpec
from ina.testbed.spec import Run

DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"
DATA_NET, MANAGEMENT_NET = "10.0.0", "10.1.0"
PS_OCTET, SWITCH_OCTET = 250, 254
LEAF_OCTET = 201
"""Rack r's leaf is 10.0.0.(201 + r) (worker hosts are 1..200); the spine has the switch's address."""
UDP_PAYLOAD = 28
"""Offset of the UDP payload from the IPv4 header (no IP options: the filters check IHL = 5)."""
DRAIN_TIMEOUT = 120.0
"""Seconds a round waits for the last one's queued packets; a 1000-packet queue at 1 Mbit/s drains in 12."""
SLOW_CLASS = "5:2"
"""The HTB class, under TCLink's 5:1, that a reordering link's rule marks packets for (ina.net.impair.egress_rules)."""
UNSHAPED_MBIT = 10_000.0
"""The rate of the HTB that an unshaped link gets where it reorders: TCLink's layout, for the slow class to sit in."""


class TestbedUnavailable(RuntimeError):
    """The testbed cannot run here (not root, Mininet or BMv2 missing); the message says what to do."""


def import_mininet() -> Any:
    """The ``mininet`` package: importable as is, or Debian's copy loaded alone.

    Debian's ``mininet`` package installs the module for the system Python, in
    /usr/lib/python3/dist-packages; a virtual environment or another Python does not see it.
    Loading just that package from there (not adding the whole folder to ``sys.path``) keeps
    Debian's other Python packages from shadowing the ones this Python installed.
    """
    try:
        import mininet
    except ImportError:
        spec = importlib.machinery.PathFinder.find_spec("mininet", [DEBIAN_DIST_PACKAGES])
        if spec is None or spec.loader is None:
            raise TestbedUnavailable(f"Mininet is not installed: `apt-get install mininet` (Debian/Ubuntu) puts it in "
                                     f"{DEBIAN_DIST_PACKAGES}, or `pip install mininet` with its mnexec") from None  # fmt: skip
        mininet = importlib.util.module_from_spec(spec)
        sys.modules["mininet"] = mininet
        spec.loader.exec_module(mininet)
    return mininet


def why_not(run: Optional[Run] = None) -> Optional[str]:
    """Why this machine cannot run ``run`` (or any run): None when it can."""
    if os.geteuid() != 0:
        return "the testbed needs root (it creates network namespaces and links): run it with sudo"
    try:
        import_mininet()
    except TestbedUnavailable as error:
        return str(error)
    for tool in ("mnexec", "ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH: install Mininet's Debian package (mininet) and iproute2"
    if run is None:
        return None
    if run.impaired and shutil.which("nft") is None:
        return "link loss, duplication and reordering are emulated with nftables: install nftables (`apt-get install nftables`)"
    if max(link.delay for link in run.links) > 0 and not netem_available():
        return ("link delay needs the kernel's sch_netem qdisc, which this kernel lacks (`modprobe sch_netem` fails); "
                "set the links' delay to 0")  # fmt: skip
    if run.switch.target == "bmv2":
        from ina.p4 import toolchain

        if importlib.util.find_spec("p4") is None or importlib.util.find_spec("bm_runtime") is None:
            return "switch.target bmv2 needs the 'p4' extra: pip install -e '.[p4]'"
        return toolchain.missing("p4c", "simple_switch_grpc")
    return None


def netem_available() -> bool:
    """Whether the kernel has sch_netem: tried on a veth pair in a namespace made for the test."""
    name = f"inanetem{uuid.uuid4().hex[:6]}"
    try:
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        command = ["ip", "netns", "exec", name, "sh", "-c", "ip link add a type veth peer name b && tc qdisc add dev a root netem delay 1ms"]
        return subprocess.run(command, capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@dataclass(frozen=True)
class Route:
    """Where a BMv2 switch node sends packets for `ip`: out of its port `port` (1, 2, ...), to the MAC `mac`."""

    ip: str
    mac: str
    port: int


@dataclass(frozen=True)
class SwitchNode:
    """Where one `ina switch` runs (`Run.switch_names`): its node, the data and control addresses it listens on, its
    MAC; with BMv2 also the interfaces it owns (BMv2 port i + 1 is `ports[i]`) and its route to every address."""

    name: str
    node: Any
    ip: str
    control_ip: str
    mac: str
    ports: tuple[str, ...] = ()
    routes: tuple[Route, ...] = ()


@dataclass(frozen=True)
class Endpoint:
    """One host as the processes see it: its Mininet node, data address and interface."""

    node: Any
    ip: str
    interface: str
    mac: str
    management_ip: Optional[str] = None


class Network:
    """The run's Mininet network; ``close()`` (or leaving the ``with``) removes all of it."""

    def __init__(self, run: Run, tag: Optional[str] = None) -> None:
        import_mininet()
        from mininet.link import Link, TCLink
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import Host

        setLogLevel("critical")  # TCLink's HTB prints a harmless quantum warning per link; shaping is checked below
        Mininet.inited = True  # skip Mininet.init(): it raises machine-wide rlimits and sysctls
        self.tag = tag or "i" + uuid.uuid4().hex[:3]
        self.run = run
        self.bmv2 = run.switch.target == "bmv2"
        self.net = Mininet(topo=None, controller=None, host=Host, link=TCLink, build=False)
        self.links: list[tuple[Any, Any]] = []  # (intf, intf) of every shaped link
        self.shapes: list[LinkSpec] = []  # the run file's shape of each of them
        self.ports: list[tuple[Any, LinkSpec]] = []  # the switch nodes' ends of them: their egress queues
        self._closed = False
        try:
            self._build(Link)
        except BaseException:
            self.close()
            raise

    def _build(self, plain_link: Any) -> None:
        run, tag = self.run, self.tag
        nodes = {name: self.net.addHost(f"{tag}{_short(name)}", ip=None) for name in run.switch_names}
        top = nodes["spine" if run.racks else "switch"]

        def host(name: str, octet: int, shape: LinkSpec, above: Any) -> tuple[Any, Any]:
            node = self.net.addHost(f"{tag}{name}", ip=f"{DATA_NET}.{octet}/24", mac=f"02:00:00:00:00:{octet:02x}")
            return node, self._shaped(node, above, shape).intf1

        workers = [host(f"w{i}", i + 1, run.link, nodes[f"leaf{run.rack_of(i)}"] if run.racks else top) for i in range(run.worker_hosts)]
        ps_node, ps_intf = host("ps", PS_OCTET, run.ps_host_link, top)
        leaves = [nodes[f"leaf{r}"] for r in range(len(run.racks))]
        self.uplinks = [self._shaped(leaf, top, run.uplink_link, both_ports=True).intf1 for leaf in leaves]
        # BMv2's control APIs: an unshaped network of its own, every worker host's and leaf's link to the top switch node
        management = [self.net.addLink(node, top, cls=plain_link) for node in [n for n, _ in workers] + leaves] if self.bmv2 else []
        self.net.build()
        for node in self.net.hosts:
            _check(node, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        # One wire packet per skb where the shaping and the loss rules see it: TCP then sends
        # MSS-sized skbs (UDP GSO is off in our processes: INA_UDP_GSO=0).
        for node in self.net.hosts:
            _ip_batch(node, [f"link set dev {i.name} gso_max_segs 1" for i in node.intfList() if i.name != "lo"])
        if self.bmv2:  # veth leaves checksums to the receiver; BMv2 forwards frames as they are
            for node, intf in workers + [(ps_node, ps_intf)]:
                _check(node, "ethtool", "-K", intf.name, "tx", "off")
        self.workers = [Endpoint(node, f"{DATA_NET}.{i + 1}", intf.name, intf.MAC(),
                                 f"{MANAGEMENT_NET}.{i + 1}" if self.bmv2 else None)
                        for i, (node, intf) in enumerate(workers)]  # fmt: skip
        self.ps = Endpoint(ps_node, f"{DATA_NET}.{PS_OCTET}", ps_intf.name, ps_intf.MAC())
        if self.bmv2:
            self.switches = self._bmv2_switches(nodes, [link.intf1 for link in management], [link.intf2 for link in management])
        else:
            self.switches = {name: self._bridged(name, node) for name, node in nodes.items()}
        self._static_arp()
        self._impair()
        self._check_shaping()

    def _shaped(self, node: Any, above: Any, shape: LinkSpec, both_ports: bool = False) -> Any:
        """A link from `node` up to the switch node `above`, shaped as `shape` says each way; its switch
        ports (the upper end, and with `both_ports` the lower one too: an uplink) get the egress queues."""
        options: dict[str, Any] = {}
        if shape.bw > 0:
            options["bw"] = shape.bw
        if shape.delay > 0:
            options["delay"] = f"{shape.delay:g}ms"
        link = self.net.addLink(node, above, **options)
        self.links.append((link.intf1, link.intf2))
        self.shapes.append(shape)
        self.ports += [(link.intf2, shape)] + ([(link.intf1, shape)] if both_ports else [])
        return link

    def _bridged(self, name: str, node: Any) -> SwitchNode:
        """The software switch node `name`: a bridge of all its ports, carrying the address its `ina switch` listens on."""
        ip = f"{DATA_NET}.{_switch_octet(name)}"
        mac = _bridge(node, "br0", [i for i in node.intfList() if i.name != "lo"], f"{ip}/24")
        return SwitchNode(name, node, ip, ip, mac)

    def _bmv2_switches(self, nodes: dict[str, Any], below: list[Any], above: list[Any]) -> dict[str, SwitchNode]:
        """BMv2 at every switch node: it owns the node's data ports, and routes each address out of the port that leads
        to it. The control APIs listen on the management network (`below`, the hosts' and leaves' ends of its links;
        `above`, the top node's, bridged there): the top node's on the bridge, a leaf's on its own end."""
        top = nodes["spine" if self.run.racks else "switch"]
        own = {intf.node: intf for intf in below}
        for endpoint, intf in zip(self.workers, below):
            _check(endpoint.node, "ip", "addr", "add", f"{endpoint.management_ip}/24", "dev", intf.name)
        switches = {}
        for name, node in nodes.items():
            octet = _switch_octet(name)
            control_ip = f"{MANAGEMENT_NET}.{octet}"
            if node is top:
                _bridge(top, "mg0", above, f"{control_ip}/24")
            else:
                _check(node, "ip", "addr", "add", f"{control_ip}/24", "dev", own[node].name)
            ports = self._data_ports(node)
            for port in ports:
                _check(node, "ip", "addr", "flush", "dev", port.name)
            switches[name] = SwitchNode(name, node, f"{DATA_NET}.{octet}", control_ip, f"02:00:00:00:00:{octet:02x}", tuple(p.name for p in ports))
        addresses = {e.node: (e.ip, e.mac) for e in [*self.workers, self.ps]} | {s.node: (s.ip, s.mac) for s in switches.values()}
        return {name: replace(switch, routes=self._routes(switch.node, addresses)) for name, switch in switches.items()}

    def _data_ports(self, node: Any) -> list[Any]:
        """`node`'s ends of the data network's links, in the order they were made (BMv2 port i + 1 is the i-th):
        a flat switch's workers, then the PS; a leaf's rack's hosts, then its uplink; the spine's PS, then its uplinks."""
        ends = {intf for pair in self.links for intf in pair}
        return [intf for intf in node.intfList() if intf in ends]

    def _routes(self, node: Any, addresses: dict[Any, tuple[str, str]]) -> tuple[Route, ...]:
        """Switch node `node`'s route to every other node with an address: out of the port whose link leads to it (the
        data network is a tree, so one does), to that node's own MAC, which every switch on the way keeps."""
        routes = []
        for number, port in enumerate(self._data_ports(node), start=1):
            beyond = self._beyond(port)
            routes += [Route(*addresses[n], number) for n in self.net.hosts if n in beyond and n in addresses]
        return tuple(routes)

    def _beyond(self, port: Any) -> set[Any]:
        """The nodes that `port`'s node reaches through `port`: its link's far end and everything behind that."""
        neighbours: dict[Any, list[Any]] = {}
        for a, b in self.links:
            neighbours.setdefault(a.node, []).append(b.node)
            neighbours.setdefault(b.node, []).append(a.node)
        far = port.link.intf2.node if port.link.intf1 is port else port.link.intf1.node
        reached, frontier = {port.node, far}, [far]
        while frontier:
            for other in neighbours[frontier.pop()]:
                if other not in reached:
                    reached.add(other)
                    frontier.append(other)
        return reached - {port.node}

    @property
    def switch_ip(self) -> str:
        """Where every worker of a flat run (or of a racked run's spine-only job) sends: the switch, or the spine."""
        return self.switches["spine" if self.run.racks else "switch"].ip

    def _static_arp(self) -> None:
        """Every host and switch node knows every other's MAC: no ARP on lossy links."""
        everyone = [*self.workers, self.ps]
        switches = list(self.switches.values())
        addresses = [(e.ip, e.mac) for e in everyone] + [(s.ip, s.mac) for s in switches]
        for node, ip, device in [(e.node, e.ip, e.interface) for e in everyone] + [(s.node, s.ip, "br0") for s in switches if not self.bmv2]:
            _ip_batch(node, [f"neigh replace {other} lladdr {mac} dev {device} nud permanent" for other, mac in addresses if other != ip])

    def _impair(self) -> None:
        """Drop each link's `loss` percent of the packets leaving each of its ends, send its `duplicate` percent twice and
        hold its `reorder` percent back in a slow class until the later ones have left (nftables, netdev egress, and
        HTB: the kernel has no netem)."""
        by_node: dict[tuple[Any, float, float, float], list[str]] = {}
        for intf, shape in self._impaired_ends():
            by_node.setdefault((intf.node, shape.loss, shape.duplicate, shape.reorder), []).append(intf.name)
            if shape.reorder:
                _check(intf.node, "sh", "-c", slow_class_commands(intf.name, shape.bw))
        for (node, loss, duplicate, reorder), names in by_node.items():
            table = f"ina_testbed{round(loss * 1000)}_{round(duplicate * 1000)}_{round(reorder * 1000)}"
            rules = egress_rules(table, names, loss / 100, duplicate / 100, reorder / 100, slow_class=SLOW_CLASS)
            _check(node, "nft", "-f", "-", input=rules)

    def _impaired_ends(self) -> Iterator[tuple[Any, LinkSpec]]:
        """(interface, its link's shape) for both ends of every link that drops, duplicates or reorders."""
        for pair, shape in zip(self.links, self.shapes):
            if shape.impaired:
                yield from ((intf, shape) for intf in pair)

    def _check_shaping(self) -> None:
        for pair, shape in zip(self.links, self.shapes):
            if shape.bw <= 0:
                continue
            for intf in pair:
                qdiscs = _check(intf.node, "tc", "qdisc", "show", "dev", intf.name)
                if "htb" not in qdiscs and "tbf" not in qdiscs and "hfsc" not in qdiscs:
                    raise RuntimeError(f"link shaping failed on {intf.name}: tc shows {qdiscs.strip()!r}")

    def prioritize(self, on: bool) -> None:
        """Egress queues by priority (docs/protocol.md, "Egress queues") on the switch node's end of every shaped
        link, or (off) one FIFO again: the switch's ports are these interfaces' queues, whichever target forwards."""
        for port, shape in self.ports:
            if shape.bw <= 0:
                continue  # an unshaped veth has no queue to order
            commands = priority_queue_commands(port.name, shape.bw) if on else fifo_commands(port.name, shape.bw if shape.reorder else 0)
            _check(port.node, "sh", "-c", commands)

    def rule_counters(self) -> dict[str, dict[str, int]]:
        """The impairment rules' counters by action (`drop`, `dup`, `priority`) and interface, both ends of each
        impaired link, read once from every node's nftables (ina.net.impair.rule_counters)."""
        chains = {chain_name(intf.name): intf.name for intf, _ in self._impaired_ends()}
        counts: dict[str, dict[str, int]] = {}
        for node in {intf.node for intf, _ in self._impaired_ends()}:
            for action, by_interface in rule_counters(_check(node, "nft", "list", "ruleset", "netdev"), chains).items():
                counts.setdefault(action, {}).update(by_interface)
        return counts

    def reordered(self) -> dict[str, int]:
        """Packets each end of a reordering link sent through its slow class, behind the packets queued after them
        (tc's counters; on an idle link one leaves at once, passed by none)."""
        return {intf.name: slow_class_sent(_check(intf.node, "tc", "-s", "class", "show", "dev", intf.name, "classid", SLOW_CLASS))
                for intf, shape in self._impaired_ends() if shape.reorder}  # fmt: skip

    def queue_drops(self) -> dict[str, int]:
        """Packets the links' queues dropped (tc's counters), per interface, where any were."""
        counts = {name: sum(map(int, re.findall(r"dropped (\d+)", stats))) for name, stats in self._queue_stats()}
        return {name: count for name, count in counts.items() if count}

    def drain(self, timeout: float = DRAIN_TIMEOUT) -> float:
        """Wait until no link's queue holds a packet; the seconds it took. A round's leftovers (RESULT copies queued
        for seconds behind the PS's slow link) must not reach the next round's services nor take their link and CPU."""
        began = time.monotonic()
        while queued := {name: count for name, stats in self._queue_stats() if (count := queued_packets(stats))}:
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"the links' queues still hold packets after {timeout:g} s: {queued}")
            time.sleep(0.1)
        return time.monotonic() - began

    def _queue_stats(self) -> Iterator[tuple[str, str]]:
        """(interface, `tc -s qdisc show` of it) for both ends of every shaped link."""
        for pair in self.links:
            for intf in pair:
                yield intf.name, _check(intf.node, "tc", "-s", "qdisc", "show", "dev", intf.name)

    def udp_buffer_drops(self) -> dict[str, int]:
        """Datagrams each host's kernel dropped for a full socket buffer (/proc/net/snmp RcvbufErrors), where any were."""
        dropped: dict[str, int] = {}
        for node in self.net.hosts:
            lines = [line.split() for line in _check(node, "cat", "/proc/net/snmp").splitlines() if line.startswith("Udp:")]
            count = int(lines[1][lines[0].index("RcvbufErrors")])
            if count:
                dropped[node.name] = count
        return dropped

    def uplink_ends(self) -> list[tuple[int, str]]:
        """Per rack, the PID of its leaf's shell (whose /proc/PID/net/dev is the leaf's) and the name of its uplink there."""
        return [(intf.node.pid, intf.name) for intf in self.uplinks]

    def interface_names(self) -> list[str]:
        return sorted(intf.name for node in self.net.hosts for intf in node.intfList() if intf.name != "lo")

    def shell_pids(self) -> list[int]:
        return [node.pid for node in self.net.hosts if node.shell is not None]

    def namespaces(self) -> list[int]:
        """The inode numbers of the nodes' network namespaces (as in /proc/PID/ns/net)."""
        return sorted({os.stat(f"/proc/{pid}/ns/net").st_ino for pid in self.shell_pids()})

    def close(self) -> None:
        """Stop every node's shell; with them go the namespaces and every interface. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for node in self.net.hosts:
            try:
                node.terminate()
            except Exception:  # a shell that is gone already
                pass
        for pid in [n.shell.pid for n in self.net.hosts if n.shell is not None]:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def slow_class_commands(device: str, mbit: float) -> str:
    """Shell commands: the slow class of a link's end that reorders (`mbit`: the link's rate; 0: unshaped, which first
    gets TCLink's HTB at UNSHAPED_MBIT). The reorder rule marks packets with its id as their priority, which HTB
    classifies by before its filters, so the priority queues' filters never see them. It sits under TCLink's class
    5:1 at the lowest priority with an own rate of 8 bit/s: it sends only what 5:1 lends when the link's other
    classes are empty (but queue 0's, which has its priority: round robin), so a marked packet leaves after the
    later ones queued meanwhile (the first after a minute idle may instead jump ahead, on its own rate's tokens).
    On a link that never queues, nothing is reordered."""
    lines = [] if mbit else [f"tc qdisc add dev {device} root handle 5:0 htb default 1",
                             f"tc class add dev {device} parent 5:0 classid 5:1 htb rate {UNSHAPED_MBIT:g}mbit burst 15k"]  # fmt: skip
    rate = mbit or UNSHAPED_MBIT
    lines.append(f"tc class add dev {device} parent 5:1 classid {SLOW_CLASS} htb rate 8bit ceil {rate:g}mbit prio {EGRESS_QUEUES - 1} quantum 1514")
    return " && ".join([*lines, fifo_commands(device, rate)])


def slow_class_sent(stats: str) -> int:
    """The packets a class has sent, from its `tc -s class show` (0 where there is none)."""
    sent = re.search(r"Sent \d+ bytes (\d+) pkt", stats)
    return int(sent.group(1)) if sent else 0


def priority_queue_commands(device: str, mbit: float) -> str:
    """Shell commands: TCLink's HTB class 5:1 (the link's rate) split into EGRESS_QUEUES classes that borrow its
    rate in priority order (HTB's `prio`; each is guaranteed a token 8 kbit/s, so the order is all but strict), each
    ina DATA or PARTIAL in the class of its header's queue (min(priority >> 3, 6) + 1), a RESULT flagged HOLD (atp: a
    step waits for it) in queue 1's, anything else in queue 0's. This kernel has HTB and u32 but not the prio qdisc."""
    ours = f"match u8 0x45 0xff at 0 match u8 17 0xff at 9 match u8 {MAGIC:#x} 0xff at {UDP_PAYLOAD}"
    lines = [fifo_commands(device)]
    lines += [_queue_class_command(device, queue, mbit, prio=EGRESS_QUEUES - 1 - queue) for queue in range(EGRESS_QUEUES)]
    # (value, mask) of the priority byte: queue q takes 8(q-1) .. 8(q-1)+7, the top one 48 and up (prefixes 0011, 01, 1)
    priorities = {queue: [(8 * (queue - 1), 0xF8)] for queue in range(1, EGRESS_QUEUES - 1)}
    priorities[EGRESS_QUEUES - 1] = [(0x30, 0xF0), (0x40, 0xC0), (0x80, 0x80)]
    for kind, (queue, matches) in itertools.product((Kind.DATA, Kind.PARTIAL), priorities.items()):
        for value, mask in matches:
            lines.append(f"tc filter add dev {device} parent 5: protocol ip prio 1 u32 {ours} match u8 {kind:#x} 0xff at {UDP_PAYLOAD + KIND_OFFSET} "
                         f"match u8 {value:#x} {mask:#x} at {UDP_PAYLOAD + PRIORITY_OFFSET} flowid {_queue_class(queue)}")  # fmt: skip
    lines.append(f"tc filter add dev {device} parent 5: protocol ip prio 1 u32 {ours} match u8 {Kind.RESULT:#x} 0xff at {UDP_PAYLOAD + KIND_OFFSET} "
                 f"match u8 {Flag.HOLD:#x} {Flag.HOLD:#x} at {UDP_PAYLOAD + FLAGS_OFFSET} flowid {_queue_class(1)}")  # fmt: skip
    lines.append(_catch_all(device))
    return " && ".join(lines)


def queued_packets(stats: str) -> int:
    """The packets an interface's queues hold, from its `tc -s qdisc show`: the most any qdisc reports (a root
    qdisc's backlog counts its classes' packets again)."""
    return max(map(int, re.findall(r"backlog \S+ (\d+)p", stats)), default=0)


def fifo_commands(device: str, mbit: float = 0.0) -> str:
    """Shell commands that take the queues of `priority_queue_commands` away again (none there: nothing to do),
    leaving TCLink's HTB class 5:1 a leaf with one FIFO; on a link with a slow class (`mbit`: the link's rate), whose
    5:1 is an inner class, the one FIFO is queue 0's class, above the slow class, and takes every unmarked packet."""
    classes = " ".join(_queue_class(q) for q in range(EGRESS_QUEUES))
    clear = (f"{{ tc filter del dev {device} parent 5: 2>/dev/null; "
             f"for c in {classes}; do tc class del dev {device} classid $c 2>/dev/null; done; true; }}")  # fmt: skip
    return " && ".join([clear, _queue_class_command(device, 0, mbit, prio=0), _catch_all(device)]) if mbit else clear


def _queue_class_command(device: str, queue: int, mbit: float, prio: int) -> str:
    """Egress queue `queue`'s class: guaranteed a token 8 kbit/s, it borrows the link's rate from 5:1 in `prio`'s order."""
    return f"tc class add dev {device} parent 5:1 classid {_queue_class(queue)} htb rate 8kbit ceil {mbit:g}mbit prio {prio}"


def _catch_all(device: str) -> str:
    """The last filter: what no other filter classified goes to queue 0's class."""
    return f"tc filter add dev {device} parent 5: protocol all prio 2 u32 match u32 0 0 flowid {_queue_class(0)}"


def _queue_class(queue: int) -> str:
    return f"5:{0x10 + queue:x}"


def _switch_octet(name: str) -> int:
    """The last octet of switch node `name`'s addresses: a leaf's 201 + its rack, the switch's or the spine's 254."""
    return LEAF_OCTET + int(name[len("leaf") :]) if name.startswith("leaf") else SWITCH_OCTET


def _short(name: str) -> str:
    """A switch node's name in its interfaces' names (at most 15 characters): sw, sp, lf0, lf1, ..."""
    return {"switch": "sw", "spine": "sp"}.get(name) or "lf" + name[len("leaf") :]


def _bridge(node: Any, name: str, ports: list[Any], address: str) -> str:
    """A Linux bridge in `node` over `ports`, carrying `address`; returns its MAC."""
    commands = [f"link add {name} type bridge", f"link set {name} up", f"addr add {address} dev {name}"]
    commands += [f"link set {p.name} master {name}" for p in ports]
    _ip_batch(node, commands)
    words = _check(node, "ip", "-o", "link", "show", "dev", name).split()
    return words[words.index("link/ether") + 1]


def _ip_batch(node: Any, lines: list[str]) -> None:
    _check(node, "ip", "-batch", "-", input="\n".join(lines) + "\n")


def _check(node: Any, *command: str, input: Optional[str] = None) -> str:
    """Run `command` in `node`'s namespace (mnexec -a, not its interactive shell); its output, or an error."""
    done = subprocess.run(["mnexec", "-a", str(node.pid), *command], input=input, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"in {node.name}: `{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout
