"""The progress watchdog (hdl/ace/watchdog.py): fires once after ``limit`` cycles of work without a transfer."""

from amaranth.sim import Simulator

from syncfabric.hdl.ace.watchdog import Watchdog


def _run(bench):
    dut = Watchdog()
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def testbench(ctx):
        await bench(ctx, dut)

    sim.add_testbench(testbench)
    sim.run()


def test_it_fires_once_after_limit_idle_cycles_and_stays_hung():
    async def bench(ctx, dut):
        ctx.set(dut.limit, 20)
        ctx.set(dut.busy, 1)
        fired = []
        for cycle in range(60):
            if cycle == 10:                     # a transfer restarts the count
                ctx.set(dut.moved, 1)
            elif cycle == 11:
                ctx.set(dut.moved, 0)
            await ctx.tick()
            if ctx.get(dut.fire):
                fired.append(cycle)
        # 20 cycles without a transfer after cycle 11, plus the registered compare and the flag
        assert fired == [32], fired
        assert ctx.get(dut.hung)
        ctx.set(dut.moved, 1)                   # hung stays until the engine is reset by an abort
        await ctx.tick().repeat(5)
        assert ctx.get(dut.hung) and not ctx.get(dut.fire)
    _run(bench)


def test_no_work_or_a_zero_limit_never_fires():
    async def bench(ctx, dut):
        ctx.set(dut.limit, 5)
        for _ in range(50):                     # idle engine: nothing to wait for
            await ctx.tick()
            assert not ctx.get(dut.fire) and not ctx.get(dut.hung)
        ctx.set(dut.limit, 0)
        ctx.set(dut.busy, 1)
        for _ in range(50):                     # off
            await ctx.tick()
            assert not ctx.get(dut.fire) and not ctx.get(dut.hung)
        ctx.set(dut.limit, 3)
        await ctx.tick().repeat(8)
        assert ctx.get(dut.hung)
    _run(bench)
