"""Element types and reduction operators: the codes shared by the RTL, the golden models and the driver.

This module is the single definition of these encodings. It is plain Python (no Amaranth, no numpy) so that
the golden models can use it; the RTL layouts in :mod:`syncfabric.hdl.common.layouts` take their field shapes
from these enums, and the host driver packs descriptors with the same values.
"""

import enum

__all__ = ["DType", "ReduceOp", "DTYPE_BYTES", "dtype_bytes"]


class _Parsable(enum.IntEnum):
    @classmethod
    def parse(cls, name):
        """Return the member named ``name`` (case-insensitive, e.g. ``"fp16"``, ``"sum"``) or the member itself,
        with a clear error listing the valid names otherwise."""
        if isinstance(name, cls):
            return name
        try:
            return cls[str(name).upper()]
        except KeyError:
            raise ValueError(f"unknown {cls._what} {name!r}; expected one of "
                             f"{', '.join(m.name.lower() for m in cls)}") from None


class DType(_Parsable):
    """Element type of a payload (2-bit code in descriptors and ALU beats)."""

    FP32 = 0
    FP16 = 1
    BF16 = 2
    INT32 = 3


class ReduceOp(_Parsable):
    """Element-wise reduction operator (2-bit code)."""

    SUM = 0
    MAX = 1
    MIN = 2


DType._what = "dtype"
ReduceOp._what = "reduction op"


DTYPE_BYTES = {DType.FP32: 4, DType.FP16: 2, DType.BF16: 2, DType.INT32: 4}


def dtype_bytes(dtype):
    """Size in bytes of one element of ``dtype``."""
    return DTYPE_BYTES[DType(dtype)]


class FloatFormat:
    """Bit layout of an IEEE-754-style binary floating-point format (sign, exponent, fraction)."""

    def __init__(self, name, exp_bits, frac_bits):
        self.name = name
        self.exp_bits = exp_bits
        self.frac_bits = frac_bits
        self.width = 1 + exp_bits + frac_bits
        self.bias = (1 << (exp_bits - 1)) - 1
        self.exp_max = (1 << exp_bits) - 1
        #: The one NaN the engine produces: positive, quiet bit set, zero payload.
        self.canonical_nan = (self.exp_max << frac_bits) | (1 << (frac_bits - 1))
        self.inf = self.exp_max << frac_bits

    def __repr__(self):
        return f"FloatFormat({self.name}, e{self.exp_bits}m{self.frac_bits})"


FLOAT_FORMATS = {
    DType.FP32: FloatFormat("fp32", 8, 23),
    DType.FP16: FloatFormat("fp16", 5, 10),
    DType.BF16: FloatFormat("bf16", 8, 7),
}

__all__ += ["FloatFormat", "FLOAT_FORMATS"]


class Collective(_Parsable):
    """Collective opcode of a descriptor (8-bit field). 0 is reserved so an all-zero descriptor is invalid."""

    ALLREDUCE = 1
    REDUCE_SCATTER = 2
    ALLGATHER = 3
    ALLTOALL = 4
    BROADCAST = 5
    REDUCE = 6
    BARRIER = 7

    @property
    def reduces(self):
        """Whether the collective combines contributions in the ALUs (all-reduce, reduce-scatter, reduce); the
        others only move data, so an engine runs them for element types its ALUs were not built for."""
        return self in (Collective.ALLREDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE)

    @property
    def rooted(self):
        """Whether the collective has a root rank (broadcast, reduce)."""
        return self in (Collective.BROADCAST, Collective.REDUCE)

    @property
    def segmented(self):
        """Whether a chunk's working set has one segment per rank (reduce-scatter, all-gather, all-to-all)."""
        return self in (Collective.REDUCE_SCATTER, Collective.ALLGATHER, Collective.ALLTOALL)

    @property
    def golden_name(self):
        """The collective's name in :mod:`.chunking` / the program generators (e.g. ``"reduce_scatter"``)."""
        return self.name.lower()


class Algorithm(_Parsable):
    """Algorithm code of a loaded program (8-bit field). 0 in a descriptor means "the program loaded for this
    collective on this communicator, whatever its algorithm"."""

    DEFAULT = 0
    RING = 1
    BIDIR_RING = 2
    HIERARCHICAL = 3
    HALVING_DOUBLING = 4
    DIRECT = 5
    ASYNC = 6
    HIERARCHICAL_ROTATED = 7

    @classmethod
    def parse(cls, name):
        if isinstance(name, str):
            name = name.replace("-", "_")
        return super().parse(name)

    @property
    def golden_name(self):
        """The algorithm's name in :mod:`.algorithms` (e.g. ``"bidir-ring"``)."""
        return self.name.lower().replace("_", "-")


class Status(enum.IntEnum):
    """Completion status codes (8-bit field of a completion record). 1-15: the descriptor was rejected before
    anything moved (nothing was written to memory); 16 and up: a fault while the collective ran."""

    OK = 0
    BAD_COLLECTIVE = 1      #: unknown collective opcode
    BAD_ALGORITHM = 2       #: no program loaded for this collective on the communicator, or another algorithm
    BAD_DTYPE = 3           #: unknown element type, or a reduction of a type the ALUs were not built for
    BAD_OP = 4              #: unknown reduction operator
    ZERO_COUNT = 5          #: element count is zero
    MISALIGNED = 6          #: an address is not a multiple of the element size
    OUT_OF_WINDOW = 7       #: a buffer is not inside one registered memory window
    BAD_COMM = 8            #: communicator id out of range or not configured
    SRAM_TOO_SMALL = 9      #: a chunk of this program does not fit a chunk buffer / landing buffer
    BAD_FLAGS = 10          #: a flag this engine does not implement
    BAD_ROOT = 11           #: root rank out of range
    AXI_ERROR = 16          #: a DMA burst got a SLVERR/DECERR response
    LINK_CRC = 17           #: a packet of this collective failed its CRC check
    PROTOCOL = 18           #: a message did not match the step waiting for it (header mismatch)
    ILLEGAL_INSTRUCTION = 19  #: the program holds a word that is not a valid step
    #: a message came from a rank whose command disagrees with this one: another element type, or (on a step
    #: that reduces) another reduction operator (packet header ``dtype``/``op``), or another element count
    #: (the awaited message has another ``length``, or another ``final``: its chunk is the last of one
    #: rank's command only)
    MISMATCH = 20
    #: the command could not finish: a step waited STEP_TIMEOUT cycles for its grant (a dead link, a peer that
    #: never posted) and the engine gave the command up, or the host aborted it after the engine's watchdog saw
    #: no progress (then written by the host driver)
    TIMEOUT = 21
    #: the command was in flight when its engine was aborted (``System.reset``, ``Communicator.abort``; written
    #: by the host driver, never by the engine)
    ABORTED = 22


Collective._what = "collective"
Algorithm._what = "algorithm"

__all__ += ["Collective", "Algorithm", "Status"]
