"""How the host reaches a simulated COARSE system: the cocotb server testbench
(:mod:`syncfabric.tb.coarse.test_server`) on Verilator or Icarus, driven from this process (:mod:`.remote`)."""
