"""Fabric topologies: endpoints, port numbering, links, link attributes and routing.

Shared by the golden executor, the RTL system tops and the performance model, so the port numbering below
is part of the hardware contract (documented again in ``docs/programs.md``).

Every port is full duplex: port ``k`` of rank ``r`` has an output side (TX) and an input side (RX) facing the
same neighbour. A link is directed, ``(src_rank, src_port) -> (dst_rank, dst_port)``: the data leaves on the
TX side of ``src_port`` and arrives on the RX side of ``dst_port``, the port of ``dst_rank`` facing back to
``src_rank``.

* :class:`Ring` ``(p)``: port 0 faces the next rank ``r+1``, port 1 the previous rank ``r-1`` (mod p).
  Links ``(r, 0) -> (r+1, 1)``; a bidirectional ring also has ``(r, 1) -> (r-1, 0)``. A unidirectional ring
  uses only TX of port 0 and RX of port 1.
* :class:`Torus` ``(l, v, h)``: coordinates ``(x, y, z)`` in the local, vertical and horizontal dimension,
  ``rank = x + l*(y + v*z)``. Always 6 ports: ``2*d`` faces ``+1`` in dimension ``d`` and ``2*d+1`` faces
  ``-1`` (d = 0 local, 1 vertical, 2 horizontal). Every dimension is a bidirectional ring:
  ``(r, 2d) -> (r + e_d, 2d+1)`` and ``(r, 2d+1) -> (r - e_d, 2d)``. Ports of a dimension of size 1 exist in
  the numbering but have no links (tie them off). In a dimension of size 2 both ports face the same
  neighbour over two distinct links.
* :class:`Switch` ``(p)``: one port (0) to the switch; a message from ``(src, 0)`` is routed by its header's
  destination rank to ``(dst, 0)``.
"""

from dataclasses import dataclass
import math
import re

__all__ = ["LinkAttr", "Link", "Topology", "Ring", "Torus", "Switch", "parse", "spread_tie",
           "INTRA_PACKAGE", "INTER_PACKAGE"]


@dataclass(frozen=True)
class LinkAttr:
    """Attributes of one directed link: ``rate`` in flits per cycle (``0 < rate <= 1``), ``latency`` in cycles."""

    rate: float = 1.0
    latency: int = 90

    def __post_init__(self):
        if not 0 < self.rate <= 1:
            raise ValueError(f"link rate must be in (0, 1] flits/cycle, got {self.rate}")
        if isinstance(self.latency, bool) or not isinstance(self.latency, int) or self.latency < 0:
            raise ValueError(f"link latency must be a non-negative integer of cycles, got {self.latency!r}")


#: ACE Table V: intra-package links 200 GB/s, 90 cycles; inter-package 25 GB/s (1/8 the rate), 500 cycles.
INTRA_PACKAGE = LinkAttr(rate=1.0, latency=90)
INTER_PACKAGE = LinkAttr(rate=0.125, latency=500)


@dataclass(frozen=True)
class Link:
    """A directed link ``(src_rank, src_port) -> (dst_rank, dst_port)`` with its attributes."""

    src_rank: int
    src_port: int
    dst_rank: int
    dst_port: int
    attr: LinkAttr


class Topology:
    """Common interface of the fabrics. Subclasses fill in the port map."""

    #: True when messages are routed by destination rank (switch), False for point-to-point links.
    routed = False

    @property
    def n_endpoints(self):
        """Number of endpoints (ranks)."""
        raise NotImplementedError

    @property
    def n_ports(self):
        """Ports per endpoint (the same for every endpoint)."""
        raise NotImplementedError

    @property
    def spec(self):
        """The string :func:`parse` accepts for this topology."""
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__} {self.spec}>"

    def __eq__(self, other):
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self):
        return hash((type(self).__name__, self._key()))

    def _key(self):
        raise NotImplementedError

    def _check_rank(self, rank):
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.n_endpoints:
            raise ValueError(f"rank {rank!r} out of range for {self.spec} ({self.n_endpoints} endpoints)")

    def _check_port(self, port):
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < self.n_ports:
            raise ValueError(f"port {port!r} out of range for {self.spec} ({self.n_ports} ports per endpoint)")

    def port_name(self, port):
        """Human-readable name of ``port``."""
        raise NotImplementedError

    def neighbor(self, rank, port):
        """Rank that ``rank``'s TX side of ``port`` reaches, or None (no link, or a routed switch port)."""
        raise NotImplementedError

    def has_tx(self, rank, port):
        """Whether ``rank`` can transmit on ``port``."""
        raise NotImplementedError

    def has_rx(self, rank, port):
        """Whether ``rank`` can receive on ``port``."""
        raise NotImplementedError

    def link(self, src_rank, src_port, dst_rank=None):
        """``(dst_rank, dst_port)`` reached by a message leaving ``(src_rank, src_port)``.

        ``dst_rank`` is the message's destination: required on a switch, checked against the neighbour on a
        point-to-point port. Raises ValueError if there is no such link.
        """
        self._check_rank(src_rank)
        self._check_port(src_port)
        if not self.has_tx(src_rank, src_port):
            raise ValueError(f"{self.spec}: rank {src_rank} has no outgoing link on port {src_port} "
                             f"({self.port_name(src_port)})")
        nb = self.neighbor(src_rank, src_port)
        if dst_rank is not None and nb != dst_rank:
            raise ValueError(f"{self.spec}: port {src_port} ({self.port_name(src_port)}) of rank {src_rank} "
                             f"leads to rank {nb}, not to destination {dst_rank}")
        return nb, self._rx_port(src_port)

    def _rx_port(self, src_port):
        raise NotImplementedError

    def links(self):
        """All directed links (for a switch: one logical route per ordered pair of ranks)."""
        out = []
        for r in range(self.n_endpoints):
            for p in range(self.n_ports):
                if self.has_tx(r, p):
                    d, q = self.link(r, p)
                    out.append(Link(r, p, d, q, self.link_attr(r, p)))
        return tuple(out)

    def link_attr(self, rank, port):
        """:class:`LinkAttr` of the link leaving ``(rank, port)``."""
        raise NotImplementedError

    def next_port(self, cur, dst, src=None):
        """Output port of ``cur`` on the route to ``dst`` (``cur != dst``). Where both ways round a ring are
        equally short, ``+`` (a routing table's choice: it knows only the destination); given the message's
        ``src``, the way :func:`spread_tie` picks."""
        raise NotImplementedError

    def route(self, src, dst, spread_ties=False):
        """The hops ``((rank, port), ...)`` a message takes from ``src`` to ``dst`` (empty if equal).

        ``spread_ties``: where both ways round a dimension's ring are equally short (half-way round an
        even ring, and every hop of a dimension of size 2, whose two ports face the same neighbour), take
        the way :func:`spread_tie` picks for this source and destination instead of always ``+``, so that
        the ``-`` links carry half of such traffic (a program that names every hop's port can; a routing
        table, which sees only the destination, cannot)."""
        self._check_rank(src)
        self._check_rank(dst)
        hops, cur = [], src
        while cur != dst:
            port = self.next_port(cur, dst, src if spread_ties else None)
            hops.append((cur, port))
            cur, _ = self.link(cur, port, dst if self.routed else None)
            if len(hops) > self.n_endpoints:
                raise RuntimeError(f"routing loop from {src} to {dst} on {self.spec}")
        return tuple(hops)


class Ring(Topology):
    """A ring of ``p >= 2`` endpoints, unidirectional (``r -> r+1`` only) or bidirectional.

    Ports: 0 faces ``r+1`` (next, clockwise), 1 faces ``r-1`` (previous). Unidirectional rings transmit on
    port 0 and receive on port 1 only. Routing takes the shorter direction on a bidirectional ring (port 0
    on a tie) and always port 0 on a unidirectional one.
    """

    def __init__(self, p, bidirectional=False, attr=INTRA_PACKAGE):
        if isinstance(p, bool) or not isinstance(p, int) or p < 2:
            raise ValueError(f"a ring needs an integer number of endpoints >= 2, got {p!r}")
        self.p = p
        self.bidirectional = bool(bidirectional)
        self.attr = attr

    def _key(self):
        return (self.p, self.bidirectional, self.attr)

    @property
    def n_endpoints(self):
        return self.p

    @property
    def n_ports(self):
        return 2

    @property
    def spec(self):
        return f"{'bidir-ring' if self.bidirectional else 'ring'}:{self.p}"

    def port_name(self, port):
        self._check_port(port)
        return ("next", "prev")[port]

    def neighbor(self, rank, port):
        self._check_rank(rank)
        self._check_port(port)
        if not self.has_tx(rank, port):
            return None
        return (rank + 1) % self.p if port == 0 else (rank - 1) % self.p

    def has_tx(self, rank, port):
        return port == 0 or (port == 1 and self.bidirectional)

    def has_rx(self, rank, port):
        return port == 1 or (port == 0 and self.bidirectional)

    def _rx_port(self, src_port):
        return 1 - src_port

    def link_attr(self, rank, port):
        return self.attr

    def members(self):
        """Ranks in ring order (the direction of port 0)."""
        return list(range(self.p))

    def next_port(self, cur, dst, src=None):
        if not self.bidirectional:
            return 0
        ahead = (dst - cur) % self.p
        if ahead == self.p - ahead and src is not None:
            return spread_tie((src,), (dst,), 0)
        return 0 if ahead <= self.p - ahead else 1


class Torus(Topology):
    """An ``l x v x h`` 3D torus (local, vertical, horizontal); every dimension a bidirectional ring.

    ``rank = x + l*(y + v*z)``. Ports ``2d`` / ``2d+1`` face ``+1`` / ``-1`` in dimension ``d``; ports of
    dimensions of size 1 have no links. ``attrs`` gives the :class:`LinkAttr` per dimension (default: the
    local dimension intra-package, the others inter-package, as ACE Table V). Routing is XYZ (local, then
    vertical, then horizontal), the shorter way round each ring, ``+`` on a tie.
    """

    DIM_NAMES = ("local", "vertical", "horizontal")

    def __init__(self, l, v, h, attrs=None):
        dims = (l, v, h)
        for name, n in zip(self.DIM_NAMES, dims):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"torus {name} dimension must be an integer >= 1, got {n!r}")
        if l * v * h < 2:
            raise ValueError(f"a torus needs at least 2 endpoints, got {l}x{v}x{h}")
        self.dims = dims
        if attrs is None:
            attrs = (INTRA_PACKAGE, INTER_PACKAGE, INTER_PACKAGE)
        attrs = tuple(attrs)
        if len(attrs) != 3 or not all(isinstance(a, LinkAttr) for a in attrs):
            raise ValueError("torus attrs must be three LinkAttr (local, vertical, horizontal)")
        self.attrs = attrs

    def _key(self):
        return (self.dims, self.attrs)

    @property
    def n_endpoints(self):
        return math.prod(self.dims)

    @property
    def n_ports(self):
        return 6

    @property
    def spec(self):
        return "torus:" + "x".join(str(n) for n in self.dims)

    def port_name(self, port):
        self._check_port(port)
        return f"{self.DIM_NAMES[port // 2]}{'+-'[port % 2]}"

    def coords(self, rank):
        """``(x, y, z)`` of ``rank``."""
        self._check_rank(rank)
        l, v, _ = self.dims
        return rank % l, (rank // l) % v, rank // (l * v)

    def rank_of(self, x, y, z):
        """Rank at coordinates ``(x, y, z)`` (taken modulo the dimension sizes)."""
        l, v, h = self.dims
        return x % l + l * (y % v + v * (z % h))

    def line(self, rank, dim):
        """Ranks of the ring of dimension ``dim`` through ``rank``, in ``+`` order starting at coordinate 0."""
        c = list(self.coords(rank))
        out = []
        for i in range(self.dims[dim]):
            c[dim] = i
            out.append(self.rank_of(*c))
        return out

    def neighbor(self, rank, port):
        self._check_rank(rank)
        self._check_port(port)
        if not self.has_tx(rank, port):
            return None
        c = list(self.coords(rank))
        c[port // 2] += 1 if port % 2 == 0 else -1
        return self.rank_of(*c)

    def has_tx(self, rank, port):
        return self.dims[port // 2] > 1

    has_rx = has_tx

    def _rx_port(self, src_port):
        return src_port ^ 1

    def link_attr(self, rank, port):
        self._check_port(port)
        return self.attrs[port // 2]

    def next_port(self, cur, dst, src=None):
        a, b = self.coords(cur), self.coords(dst)
        for d in range(3):
            if a[d] != b[d]:
                n = self.dims[d]
                ahead = (b[d] - a[d]) % n
                if ahead == n - ahead and src is not None:
                    return spread_tie(self.coords(src), b, d)
                return 2 * d if ahead <= n - ahead else 2 * d + 1
        raise ValueError(f"next_port: {cur} is already the destination")


class Switch(Topology):
    """``p >= 2`` endpoints on one switch; port 0 of every endpoint is its switch port (routed by destination)."""

    routed = True

    def __init__(self, p, attr=INTRA_PACKAGE):
        if isinstance(p, bool) or not isinstance(p, int) or p < 2:
            raise ValueError(f"a switch needs an integer number of endpoints >= 2, got {p!r}")
        self.p = p
        self.attr = attr

    def _key(self):
        return (self.p, self.attr)

    @property
    def n_endpoints(self):
        return self.p

    @property
    def n_ports(self):
        return 1

    @property
    def spec(self):
        return f"switch:{self.p}"

    def port_name(self, port):
        self._check_port(port)
        return "switch"

    def neighbor(self, rank, port):
        self._check_rank(rank)
        self._check_port(port)
        return None

    def has_tx(self, rank, port):
        return port == 0

    has_rx = has_tx

    def _rx_port(self, src_port):
        return 0

    def link(self, src_rank, src_port, dst_rank=None):
        self._check_rank(src_rank)
        self._check_port(src_port)
        if dst_rank is None:
            raise ValueError(f"{self.spec}: a switch routes by destination; give dst_rank")
        self._check_rank(dst_rank)
        if dst_rank == src_rank:
            raise ValueError(f"{self.spec}: rank {src_rank} cannot send to itself through the switch")
        return dst_rank, 0

    def links(self):
        return tuple(Link(s, 0, d, 0, self.attr)
                     for s in range(self.p) for d in range(self.p) if s != d)

    def link_attr(self, rank, port):
        self._check_port(port)
        return self.attr

    def members(self):
        """Ranks in the order of the logical ring used by ring algorithms on the switch."""
        return list(range(self.p))

    def next_port(self, cur, dst, src=None):
        return 0


def spread_tie(src, dst, dim):
    """Port (``2*dim`` for ``+``, ``2*dim + 1`` for ``-``) of a hop in dimension ``dim`` where both ways are
    equally short, for a message from coordinates ``src`` to ``dst``: ``+`` when the sum of the source's
    coordinates and the destination's outside ``dim`` is even.

    Under dimension-ordered routing the messages that take such a hop from one rank differ in that sum
    half the time: from the source itself (the first dimension routed) the destinations' other coordinates
    vary; at a later dimension the sources' coordinates in the dimensions already routed vary. In an
    all-to-all on torus:4x2x2 every ``+`` and ``-`` link of the size-2 dimensions carries the same number of
    messages (tests/golden/test_topology.py)."""
    parity = sum(src) + sum(c for i, c in enumerate(dst) if i != dim)
    return 2 * dim + (parity & 1)


_SPEC = re.compile(r"^\s*(ring|bidir-ring|torus|switch)\s*:\s*([0-9x\s]+?)\s*$", re.IGNORECASE)


def parse(spec):
    """Topology described by ``spec``: ``"ring:8"``, ``"bidir-ring:8"``, ``"torus:4x2x2"``, ``"switch:8"``.

    A :class:`Topology` passes through unchanged. A torus may give 1, 2 or 3 dimensions (missing ones are 1).
    """
    if isinstance(spec, Topology):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"topology spec must be a string, got {spec!r}")
    m = _SPEC.match(spec)
    if not m:
        raise ValueError(f"bad topology spec {spec!r}; expected 'ring:P', 'bidir-ring:P', 'torus:LxVxH' "
                         f"or 'switch:P'")
    kind, arg = m.group(1).lower(), m.group(2).replace(" ", "").lower()
    if kind == "torus":
        parts = arg.split("x")
        if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"bad torus dimensions {arg!r} in {spec!r}; expected e.g. 'torus:4x2x2'")
        dims = [int(p) for p in parts] + [1] * (3 - len(parts))
        return Torus(*dims)
    if not arg.isdigit():
        raise ValueError(f"bad endpoint count {arg!r} in {spec!r}; expected e.g. '{kind}:8'")
    p = int(arg)
    if kind == "ring":
        return Ring(p)
    if kind == "bidir-ring":
        return Ring(p, bidirectional=True)
    return Switch(p)
