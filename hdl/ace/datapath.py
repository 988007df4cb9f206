"""The engine's datapath: chunk SRAM, link ports, the units that move blocks and the deposit unit.

What it holds (docs/engine.md, section 1):

- the chunk SRAM (:class:`~.sram.ChunkSram`): readers are the ``K`` send units, the ``K`` receive units
  (operands) and the store unit; writers the ``K`` receive units and the load unit;
- per link port ``k``: :class:`~.link.TxPort` and :class:`~.link.RxPort`, a :class:`~.units.SendUnit`, a
  :class:`~.units.RecvUnit` (with its ALU) and a :class:`~.units.TxMux` that orders the send unit's messages
  and the receive units' forwards on the output port;
- the load unit (TX DMA side) and the store unit (RX DMA side), and the deposit unit of the asynchronous
  all-to-all, which shares both DMA engines with them (:class:`~.dmamux.ReadMux`, :class:`~.dmamux.WriteMux`)
  and borrows an RX port's landing buffer when that port's receive unit is idle.

The control plane (:class:`~.control.ControlUnit`) drives it through :func:`datapath_signature` and one
:func:`port_signature` per link port (jobs to the units and their completions, the ports' credits and landing-buffer heads it checks before a grant,
the messages' order per output port). Nothing here decides what runs when: every unit does the job it is given.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.layouts import MAX_PHASES, credit_layout, flit_layout, packet_header_layout
from ..common.logic import late
from ..common.skid import SkidBuffer
from .deposit import DepositUnit
from .dmamux import ReadMux, WriteMux
from .link import RxPort, TxPort, reserve_layout, tx_beat_layout
from .txwatch import TxWatch
from .retry import ReplayRx, ReplayTx
from .sram import ChunkSram
from .units import (STATUS_SHAPE, LoadUnit, RecvUnit, SendUnit, StoreUnit, TxMux, _w, beat_stream,
                    dma_cmd_layout, done_layout, fwd_data_layout, fwd_msg_layout, job_layouts)

__all__ = ["Datapath", "datapath_signature", "port_signature"]


def port_signature(cfg):
    """One link port's side of :func:`datapath_signature`, as the control plane sees it."""
    n, jl, dl = cfg.n_channels, job_layouts(cfg), done_layout(cfg)
    return wiring.Signature({
        "send_job": Out(stream.Signature(jl["send"])), "send_done": In(dl),
        "recv_job": Out(stream.Signature(jl["recv"])), "recv_done": In(dl),
        "unpopped": In(n),                          # RecvUnit.unpopped
        "reserve": Out(reserve_layout(cfg)),        # TxPort.reserve
        "order": Out(stream.Signature(data.StructLayout({"src": range(1 + cfg.n_ports), "empty": 1}))),
        "tx_room": In(1),                           # at most TX_LOOKAHEAD granted flits wait for the port
        "beat_credits": In(data.ArrayLayout(unsigned(cfg.landing_beats.bit_length()), n)),
        "hdr_credits": In(data.ArrayLayout(unsigned(cfg.landing_headers.bit_length()), n)),
        "heads": In(data.ArrayLayout(packet_header_layout(), n)),   # RxPort.heads / hdr_valid
        "hdr_valid": In(n),
        "nexts": In(data.ArrayLayout(packet_header_layout(), n)),  # RxPort.nexts / hdr_two
        "hdr_two": In(n),
        "dep_req": In(1),                           # the deposit unit waits for this port's landing buffer
    })


def datapath_signature(cfg):
    """The control plane's interface to the datapath besides the link ports' (:func:`port_signature`, one per
    port), as the control plane sees it (``Out``: the control plane drives it).

    Jobs are streams (the control plane offers a job in the cycle after its grant, and grants only what the
    unit will take then: its ``ready`` was high and no other job went to it since; ``load_room2`` for the load
    unit, which the load sequencer also feeds); ``*_done`` report a retired step. The deposit unit asks the
    control plane for a block's geometry (``dep_geo_*``) and for the live commands' tags
    (``cmd_tag``/``cmd_live``), and reports each deposit written (``arrived``).
    """
    jl, dl, NC = job_layouts(cfg), done_layout(cfg), cfg.n_cmds
    return wiring.Signature({
        "load_job": Out(stream.Signature(jl["load"])), "load_room2": In(1), "load_done": In(dl),
        "store_job": Out(stream.Signature(jl["store"])), "store_done": In(dl),
        "dep_geo_cmd": In(_w(NC)), "dep_geo_chunk": In(16), "dep_geo_block": In(12),
        "dep_geo_addr": Out(cfg.addr_width), "dep_geo_nbytes": Out(24), "dep_geo_in_range": Out(1),
        "cmd_tag": Out(data.ArrayLayout(unsigned(16), NC)), "cmd_live": Out(NC),
        "arrived": In(data.StructLayout({"valid": 1, "cmd": _w(NC), "status": STATUS_SHAPE})),
        "dep_idle": In(1),
    })


class Datapath(wiring.Component):
    """The datapath of an engine configured by ``cfg``.

    Ports: ``ctl`` and ``port`` (:func:`datapath_signature`, :func:`port_signature` per link port: from the
    control plane), ``tx/``tx_credit``/``rx``/
    ``rx_credit`` (arrays over the link ports), the DMA requests (``rd_cmd``/``rd_data``, ``wr_cmd``/
    ``wr_data``/``wr_done``), the ``TX_LOOKAHEAD``, spill-area and ``STEP_TIMEOUT`` registers (a port whose link
    takes no flit for that long is down: ``link_down``, :mod:`.txwatch`), and counters.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        K, fl = cfg.n_ports, flit_layout(cfg.beat_bytes)
        c32 = data.ArrayLayout(unsigned(32), K)
        super().__init__({
            "ctl": In(datapath_signature(cfg)), "port": In(port_signature(cfg)).array(K),
            "tx": Out(stream.Signature(fl)).array(K), "tx_credit": In(credit_layout()).array(K),
            "rx": In(stream.Signature(fl)).array(K), "rx_credit": Out(credit_layout()).array(K),
            "rd_cmd": Out(stream.Signature(dma_cmd_layout(cfg))), "rd_data": In(beat_stream(cfg, err=True)),
            "wr_cmd": Out(stream.Signature(dma_cmd_layout(cfg))), "wr_data": Out(beat_stream(cfg)),
            "wr_done": In(stream.Signature(data.StructLayout({"err": 1}))),
            "tx_lookahead": In(16), "spill_base": In(cfg.addr_width), "spill_entries": In(8),
            "replay_timeout": In(16), "step_timeout": In(32), "link_down": Out(K),
            "payload_rd_bytes": Out(64), "payload_wr_bytes": Out(64), "alu_beats": Out(64),
            "tx_flits": Out(c32), "tx_busy": Out(c32), "tx_stall": Out(c32), "rx_flits": Out(c32),
            "rx_crc_errs": Out(c32), "tx_replays": Out(c32), "tx_resent": Out(c32), "rx_naks": Out(c32),
            "phase_flits": Out(data.ArrayLayout(unsigned(32), MAX_PHASES)),
            "sram_conflict": Out(1), "deposits": Out(32), "spills": Out(32), "spill_bytes": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, ctl = self.cfg, self.ctl
        K = cfg.n_ports
        # SRAM clients: readers 0..K-1 send units, K..2K-1 receive units, 2K the store unit; writers 0..K-1
        # receive units, K the load unit. The store and load units come last (lowest priority): they give way
        # on a bank another unit uses.
        m.submodules.sram = sram = ChunkSram(cfg, n_readers=2 * K + 1, n_writers=K + 1)
        with m.If(sram.conflict):
            m.d.sync += self.sram_conflict.eq(1)
        m.submodules.deposit = dep = DepositUnit(cfg)
        dep_own = Signal(K)          # the deposit unit has port k's landing read side (registered hand-over)

        txp, rxp, sends, recvs, txm = [], [], [], [], []
        for k in range(K):
            txp.append(TxPort(cfg)), rxp.append(RxPort(cfg)), sends.append(SendUnit(cfg))
            recvs.append(RecvUnit(cfg)), txm.append(TxMux(cfg, k, K))
            for name, unit in (("txport", txp[k]), ("rxport", rxp[k]), ("send", sends[k]), ("recv", recvs[k]),
                               ("txmux", txm[k])):
                m.submodules[f"{name}{k}"] = unit
        # a forward's header and beats reach the TX muxes through register slices: the mux's order decision
        # (which source the port takes next) and the receive unit's result path (ALU, SRAM write, its forward
        # queue) stay in two cycles
        fwd, fwd_hdr = [], []
        for j, rj in enumerate(recvs):
            m.submodules[f"fwd{j}"] = fj = SkidBuffer(fwd_data_layout(cfg))
            m.submodules[f"fwd_hdr{j}"] = hj = SkidBuffer(fwd_msg_layout())
            wiring.connect(m, rj.fwd_data, fj.i)
            wiring.connect(m, rj.fwd_msg, hj.i)
            fwd.append(fj), fwd_hdr.append(hj)
        for k, (tx, rx, su, ru, mx, p) in enumerate(zip(txp, rxp, sends, recvs, txm, self.port)):
            crc_errs = rx.crc_errors
            # the port's flits leave through its dead-link detector (txwatch.py), before any retransmission
            m.submodules[f"txwatch{k}"] = tw = TxWatch(cfg)
            wiring.connect(m, tx.flit, tw.i)
            m.d.comb += [tw.limit.eq(self.step_timeout), self.link_down[k].eq(tw.down), su.down.eq(tw.down)]
            if cfg.replay_flits:        # link retransmission between the ports and the link (retry.py)
                m.submodules[f"replay_tx{k}"] = rtx = ReplayTx(cfg)
                m.submodules[f"replay_rx{k}"] = rrx = ReplayRx(cfg)
                wiring.connect(m, tw.o, rtx.i)
                wiring.connect(m, rtx.o, wiring.flipped(self.tx[k]))
                wiring.connect(m, wiring.flipped(self.rx[k]), rrx.i)
                wiring.connect(m, rrx.o, rx.flit)
                crc_errs = rx.crc_errors + rrx.crc_errors
                m.d.comb += [
                    rtx.ack.eq(self.tx_credit[k]), rtx.timeout.eq(self.replay_timeout),
                    self.rx_credit[k].eq(rx.credit.as_value() | rrx.ack.as_value()),
                    self.tx_replays[k].eq(rtx.replays), self.tx_resent[k].eq(rtx.resent),
                    self.rx_naks[k].eq(rrx.naks),
                ]
            else:
                wiring.connect(m, tw.o, wiring.flipped(self.tx[k]))
                wiring.connect(m, wiring.flipped(self.rx[k]), rx.flit)
                m.d.comb += self.rx_credit[k].eq(rx.credit)
            wiring.connect(m, su.msg, mx.send_msg)
            wiring.connect(m, su.data, mx.send_data)
            # the TX mux's choice of source and the port's flit formation (header CRC, credits) are two
            # cycles: register slices between them
            m.submodules[f"txhdr{k}"] = th = SkidBuffer(packet_header_layout())
            m.submodules[f"txbeat{k}"] = tb = SkidBuffer(tx_beat_layout(cfg.beat_bytes))
            wiring.connect(m, mx.msg, th.i)
            wiring.connect(m, th.o, tx.msg)
            wiring.connect(m, mx.data, tb.i)
            wiring.connect(m, tb.o, tx.data)
            wiring.connect(m, wiring.flipped(p.order), mx.order)
            m.d.comb += [
                tx.credit.eq(self.tx_credit[k]),
                # the control plane's view of the port and its units
                su.job.valid.eq(p.send_job.valid), su.job.payload.eq(p.send_job.payload),
                p.send_job.ready.eq(su.job.ready), p.send_done.eq(su.done),
                ru.job.valid.eq(p.recv_job.valid), ru.job.payload.eq(p.recv_job.payload),
                p.recv_job.ready.eq(ru.job.ready), p.recv_done.eq(ru.done),
                p.unpopped.eq(ru.unpopped), tx.reserve.eq(p.reserve),
                p.beat_credits.eq(tx.beat_credits), p.hdr_credits.eq(tx.hdr_credits),
                p.heads.eq(rx.heads), p.hdr_valid.eq(rx.hdr_valid), p.dep_req.eq(dep.req[k]),
                p.nexts.eq(rx.nexts), p.hdr_two.eq(rx.hdr_two),
                # receive unit (or, when it has borrowed the port, the deposit unit) <-> landing buffer
                rx.sel.eq(Mux(dep_own[k], dep.sel, ru.sel)),
                rx.hdr_pop.eq(Mux(dep_own[k], dep.hdr_pop, ru.hdr_pop)),
                rx.err_clear.eq(Mux(dep_own[k], dep.err_clear, ru.err_clear)),
                ru.heads.eq(rx.heads), ru.nexts.eq(rx.nexts), ru.vc_err.eq(rx.err),
                # the receive unit's valid from the buffer's registers and its own channel register (the
                # same as rx.data.valid while it owns the port, without the ownership mux on sel in front)
                ru.land.valid.eq(rx.data_pending & (rx.data_ch == ru.sel) & ~dep_own[k]),
                ru.land.payload.eq(rx.data.payload),
                rx.data.ready.eq(Mux(dep_own[k], dep.land.ready, ru.land.ready)),
                dep.heads[k].eq(rx.heads), dep.hdr_valid[k].eq(rx.hdr_valid), dep.errs[k].eq(rx.err),
                dep.levels[k].eq(rx.levels), dep.hdr_levels[k].eq(rx.hdr_levels),
                # SRAM clients
                sram.rd[k].eq(su.rd), su.rdata.eq(sram.rdata[k]),
                sram.rd[K + k].eq(ru.rd), ru.rdata.eq(sram.rdata[K + k]), sram.wr[k].eq(ru.wr),
                # counters
                self.tx_flits[k].eq(tx.flits), self.tx_busy[k].eq(tx.busy), self.tx_stall[k].eq(tx.stall),
                self.rx_flits[k].eq(rx.flits), self.rx_crc_errs[k].eq(crc_errs),
            ]
            # flits granted to the port and not yet sent (a header-only message is one flit): the control
            # plane grants a message to the port only while this is at most TX_LOOKAHEAD. The count's next
            # value and the room from it are exact (the room registered from the next value: a room one cycle
            # old let younger chunks' messages in ahead of the oldest chunk's forwards, 0.939 -> 0.887 of the
            # link bound on the demo's ring). The count is two registers, ``queued + pend``: ``pend`` holds the
            # last cycle's reservation, which arrives late (through the issue stage's grant and the job
            # builder), so no adder waits for it; the port's send (its handshake, also late) picks between two
            # sums of registers (``pend - 1`` is a register beside ``pend``, so no decrement follows the add),
            # and the room compares the reservation's flits with the room left before them.
            queued = Signal(17, name=f"tx{k}_queued")
            pend = Signal(17, name=f"tx{k}_queued_pend")
            pend_m1 = Signal(17, name=f"tx{k}_queued_pend_m1", init=(1 << 17) - 1)     # pend - 1 mod 2**17
            total = Signal(17, name=f"tx{k}_queued_total")
            left = Signal(signed(19), name=f"tx{k}_room_left")
            sent = tx.flit.valid & tx.flit.ready
            beats = p.reserve.beats
            flits = Cat(beats[0] | (beats == 0), beats[1:])
            L = self.tx_lookahead
            m.d.comb += [total.eq(queued + pend), left.eq(L - total)]
            m.d.sync += [queued.eq(Mux(sent, queued + pend_m1, total)), pend.eq(Mux(p.reserve.valid, flits, 0)),
                         pend_m1.eq(Mux(p.reserve.valid, flits - 1, -1))]
            with m.If(p.reserve.valid):
                m.d.sync += p.tx_room.eq(Mux(sent, flits <= left + 1, flits <= left))
            with m.Else():
                m.d.sync += p.tx_room.eq(Mux(sent, total <= L + 1, total <= L))
            # forwards: every receive unit offers its forward to every TX mux; the addressed one takes it
            for j, (hj, fj) in enumerate(zip(fwd_hdr, fwd)):
                m.d.comb += [
                    mx.fwd_msg[j].eq(hj.o.payload), mx.fwd_msg_valid[j].eq(hj.o.valid),
                    mx.fwd_data[j].eq(fj.o.payload), mx.fwd_data_valid[j].eq(fj.o.valid),
                ]
        for j, (hj, fj) in enumerate(zip(fwd_hdr, fwd)):
            m.d.comb += [hj.o.ready.eq(Cat(*[mx.fwd_msg_ready[j] for mx in txm]).any()),
                         fj.o.ready.eq(Cat(*[mx.fwd_data_ready[j] for mx in txm]).any())]

        # load and store units; the DMA engines are shared with the deposit unit (priority: it holds an RX
        # port while it waits)
        m.submodules.load = load = LoadUnit(cfg)
        m.submodules.store = store = StoreUnit(cfg)
        m.submodules.dep_rd_mux = drm = ReadMux(cfg)
        m.submodules.dep_wr_mux = dwm = WriteMux(cfg)
        m.d.comb += [
            load.job.valid.eq(ctl.load_job.valid), load.job.payload.eq(ctl.load_job.payload),
            ctl.load_job.ready.eq(load.job.ready), ctl.load_room2.eq(load.room2), ctl.load_done.eq(load.done),
            sram.wr[K].eq(load.wr), load.wr_free.eq(sram.wr_free[K]),
            store.job.valid.eq(ctl.store_job.valid), store.job.payload.eq(ctl.store_job.payload),
            ctl.store_job.ready.eq(store.job.ready), ctl.store_done.eq(store.done),
            sram.rd[2 * K].eq(store.rd), store.rdata.eq(sram.rdata[2 * K]), store.rd_free.eq(sram.rd_free[2 * K]),
        ]
        wiring.connect(m, dep.rd_cmd, drm.a_cmd)
        wiring.connect(m, drm.a_data, dep.rd_data)
        wiring.connect(m, load.rd_cmd, drm.b_cmd)
        wiring.connect(m, drm.b_data, load.rd_data)
        wiring.connect(m, drm.cmd, wiring.flipped(self.rd_cmd))
        wiring.connect(m, wiring.flipped(self.rd_data), drm.data)
        wiring.connect(m, dep.wr_cmd, dwm.a_cmd)
        wiring.connect(m, dep.wr_data, dwm.a_data)
        wiring.connect(m, dwm.a_done, dep.wr_done)
        # the store unit's write commands through a register slice: its command handshake and the mux's
        # arbitration (the deposit unit has priority) would otherwise be one cycle with the store's issue
        m.submodules.store_cmd = store_cmd = SkidBuffer(dma_cmd_layout(cfg))
        wiring.connect(m, store.wr_cmd, store_cmd.i)
        wiring.connect(m, store_cmd.o, dwm.b_cmd)
        wiring.connect(m, store.wr_data, dwm.b_data)
        wiring.connect(m, dwm.b_done, store.wr_done)
        wiring.connect(m, dwm.cmd, wiring.flipped(self.wr_cmd))
        wiring.connect(m, dwm.data, wiring.flipped(self.wr_data))
        wiring.connect(m, wiring.flipped(self.wr_done), dwm.done)

        # the deposit unit borrows port k's landing read side when its receive unit is idle (no RECV is granted
        # on the port while it asks; one granted the cycle before is offered now)
        m.d.sync += dep_own.eq(Cat(*[dep.req[k] & recvs[k].idle & ~recvs[k].job.valid for k in range(K)]))
        m.d.comb += dep.own.eq(dep_own)
        # (its valid, as the receive units', from the buffer's registers and its own channel register)
        m.d.comb += dep.land.valid.eq(Cat(*[dep_own[k] & rxp[k].data_pending & (rxp[k].data_ch == dep.sel)
                                            for k in range(K)]).any())
        for k in range(K):
            with m.If(dep_own[k]):
                m.d.comb += dep.land.payload.eq(rxp[k].data.payload)
        m.d.comb += [
            ctl.dep_geo_cmd.eq(dep.geo_cmd), ctl.dep_geo_chunk.eq(dep.geo_chunk), ctl.dep_geo_block.eq(dep.geo_block),
            dep.geo_addr.eq(ctl.dep_geo_addr), dep.geo_nbytes.eq(ctl.dep_geo_nbytes),
            dep.geo_in_range.eq(ctl.dep_geo_in_range),
            dep.cmd_tag.eq(ctl.cmd_tag), dep.cmd_live.eq(ctl.cmd_live),
            ctl.arrived.eq(dep.arrived), ctl.dep_idle.eq(dep.idle),
            dep.spill_base.eq(self.spill_base), dep.spill_entries.eq(self.spill_entries),
        ]

        # counters. The sums of several units' counters are registered, a cycle behind their parts: a 64-bit
        # add between the units' counters and the register bank's high-word capture was a path of its own
        m.d.sync += [self.payload_wr_bytes.eq(store.bytes + dep.deposit_bytes),
                     self.alu_beats.eq(sum(ru.alu_beats for ru in recvs))]
        m.d.comb += [
            self.payload_rd_bytes.eq(load.bytes),
            self.deposits.eq(dep.deposits), self.spills.eq(dep.spills), self.spill_bytes.eq(dep.spill_bytes),
        ]
        # per program phase: flits sent on every port by that phase's messages
        for p in range(MAX_PHASES):
            sent_p = late(m, sum((tx.flit.valid & tx.flit.ready & (tx.flit_phase == p)) for tx in txp),
                          f"phase{p}_sent")
            m.d.sync += self.phase_flits[p].eq(self.phase_flits[p] + sent_p)
        return m
