"""AXI4 (full) interface signatures, as seen from a master.

Member names are the AMBA names in lower case (``awaddr``, ``rdata``, ...), so a component with a port
``axi: Out(AXI4Signature(...))`` becomes Verilog ports ``axi__awaddr``, ``axi__rdata``, ... and cocotbext-axi
binds them with ``AxiBus.from_prefix(dut, "axi_")`` (cocotb-bus joins prefix and name with ``"_"``, giving
``axi__awaddr``); ``AxiBus.from_prefix(dut, "axi", bus_separator="__")`` is equivalent.

An engine that only reads (or only writes) has a port of :class:`AXI4ReadSignature` (AR/R) or
:class:`AXI4WriteSignature` (AW/W/B); :func:`connect_axi` joins one of each to a full :class:`AXI4Signature` port,
so a top level with ONE AXI master port can be driven by a read engine and a write engine (AXI's read and write
channels are independent, so no arbitration is needed).

QoS, region and user signals are left out: cocotbext-axi treats them as optional and interconnects default them.
"""

import enum

from amaranth.hdl import unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiBurst", "AxiResp", "AXI4ReadSignature", "AXI4WriteSignature", "AXI4Signature", "connect_axi",
           "pass_through", "READ_MEMBERS", "WRITE_MEMBERS"]


class AxiBurst(enum.IntEnum):
    """``AxBURST`` codes."""
    FIXED = 0
    INCR = 1
    WRAP = 2


class AxiResp(enum.IntEnum):
    """``xRESP`` codes."""
    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


def _addr_members(prefix, addr_width, id_width):
    return {
        f"{prefix}id": Out(unsigned(id_width)),
        f"{prefix}addr": Out(unsigned(addr_width)),
        f"{prefix}len": Out(unsigned(8)),
        f"{prefix}size": Out(unsigned(3)),
        f"{prefix}burst": Out(unsigned(2)),
        f"{prefix}lock": Out(unsigned(1)),
        f"{prefix}cache": Out(unsigned(4)),
        f"{prefix}prot": Out(unsigned(3)),
        f"{prefix}valid": Out(unsigned(1)),
        f"{prefix}ready": In(unsigned(1)),
    }


def _read_members(addr_width, data_width, id_width):
    return {
        **_addr_members("ar", addr_width, id_width),
        "rid": In(unsigned(id_width)),
        "rdata": In(unsigned(data_width)),
        "rresp": In(unsigned(2)),
        "rlast": In(unsigned(1)),
        "rvalid": In(unsigned(1)),
        "rready": Out(unsigned(1)),
    }


def _write_members(addr_width, data_width, id_width):
    return {
        **_addr_members("aw", addr_width, id_width),
        "wdata": Out(unsigned(data_width)),
        "wstrb": Out(unsigned(data_width // 8)),
        "wlast": Out(unsigned(1)),
        "wvalid": Out(unsigned(1)),
        "wready": In(unsigned(1)),
        "bid": In(unsigned(id_width)),
        "bresp": In(unsigned(2)),
        "bvalid": In(unsigned(1)),
        "bready": Out(unsigned(1)),
    }


#: Member names of the read channels (AR, R) and of the write channels (AW, W, B).
READ_MEMBERS = tuple(_read_members(32, 32, 1))
WRITE_MEMBERS = tuple(_write_members(32, 32, 1))


class _AXI4SignatureBase(wiring.Signature):
    _members = None     # function (addr_width, data_width, id_width) -> members

    def __init__(self, addr_width, data_width, id_width=1):
        if data_width < 8 or data_width & (data_width - 1):
            raise ValueError(f"AXI data width must be a power of two >= 8, not {data_width}")
        if addr_width < 12:
            raise ValueError(f"AXI address width must be at least 12 bits (4 KiB pages), not {addr_width}")
        if id_width < 1:
            raise ValueError("AXI ID width must be >= 1 (cocotbext-axi requires the ID signals)")
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        super().__init__(type(self)._members(addr_width, data_width, id_width))

    def __eq__(self, other):
        return (type(self) is type(other) and
                (self.addr_width, self.data_width, self.id_width) ==
                (other.addr_width, other.data_width, other.id_width))

    def __hash__(self):
        return hash((type(self), self.addr_width, self.data_width, self.id_width))

    def __repr__(self):
        return f"{type(self).__name__}({self.addr_width}, {self.data_width}, id_width={self.id_width})"


class AXI4ReadSignature(_AXI4SignatureBase):
    """AXI4 read channels (AR, R) of a master: ``ar*`` and ``rready`` are outputs, ``arready`` and ``r*`` inputs.

    Parameters: ``addr_width`` (bits, >= 12), ``data_width`` (bits, a power of two >= 8), ``id_width`` (>= 1).
    """
    _members = staticmethod(_read_members)


class AXI4WriteSignature(_AXI4SignatureBase):
    """AXI4 write channels (AW, W, B) of a master: ``aw*``, ``w*`` and ``bready`` are outputs, ``awready``,
    ``wready`` and ``b*`` inputs."""
    _members = staticmethod(_write_members)


class AXI4Signature(_AXI4SignatureBase):
    """A full AXI4 master port: the members of :class:`AXI4WriteSignature` and :class:`AXI4ReadSignature`."""
    _members = staticmethod(lambda a, d, i: {**_write_members(a, d, i), **_read_members(a, d, i)})

    def read_signature(self):
        """The :class:`AXI4ReadSignature` of the same widths."""
        return AXI4ReadSignature(self.addr_width, self.data_width, self.id_width)

    def write_signature(self):
        """The :class:`AXI4WriteSignature` of the same widths."""
        return AXI4WriteSignature(self.addr_width, self.data_width, self.id_width)


def pass_through(m, core, axi, *, except_for=()):
    """Connect every member of ``core`` (a master port seen from the slave side: an AXI block's ``In``
    interface) to the same member of ``axi`` (the block's ``Out`` master port towards the memory), in the
    member's direction, except the names ``except_for`` (the ones the block drives itself)."""
    for name in READ_MEMBERS + WRITE_MEMBERS:
        if name in except_for:
            continue
        if name[0] in "rb":         # memory -> engine
            m.d.comb += getattr(core, name).eq(getattr(axi, name))
        else:
            m.d.comb += getattr(axi, name).eq(getattr(core, name))


def _forward(m, port, sub, names):
    """Connect master interface ``sub`` to master port ``port`` member by member (outputs out, inputs in)."""
    for name in names:
        member = sub.signature.members[name]
        if member.flow == Out:
            m.d.comb += getattr(port, name).eq(getattr(sub, name))
        else:
            m.d.comb += getattr(sub, name).eq(getattr(port, name))


def _tie_off(m, port, names):
    """Drive the master outputs of an unused channel group to zero (no requests, not ready)."""
    for name in names:
        if port.signature.members[name].flow == Out:
            m.d.comb += getattr(port, name).eq(0)


def connect_axi(m, port, *, read=None, write=None):
    """Drive the full AXI4 master port ``port`` from a read engine's and a write engine's master interfaces.

    ``port`` is a master-side interface of :class:`AXI4Signature` (typically ``self.axi`` of a component with
    ``axi: Out(AXI4Signature(...))``); ``read`` and ``write`` are master-side interfaces of
    :class:`AXI4ReadSignature` / :class:`AXI4WriteSignature` with the same widths (typically a read engine's and a
    write engine's ``axi`` port). A group that is ``None`` is tied off (never valid, never ready). The
    connection is purely combinational.
    """
    sig = port.signature
    if isinstance(sig, wiring.FlippedSignature) or not isinstance(sig, AXI4Signature):
        raise TypeError(f"port must be a master-side AXI4Signature interface, not {sig!r}")
    for sub, want in ((read, sig.read_signature()), (write, sig.write_signature())):
        if sub is not None and sub.signature != want:
            raise TypeError(f"expected a master-side {want!r} interface, not {sub.signature!r}")
    if read is None:
        _tie_off(m, port, READ_MEMBERS)
    else:
        _forward(m, port, read, READ_MEMBERS)
    if write is None:
        _tie_off(m, port, WRITE_MEMBERS)
    else:
        _forward(m, port, write, WRITE_MEMBERS)
