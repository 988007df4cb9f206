"""How the host reaches simulated engines: the Amaranth simulator in this process (:mod:`.amaranth`,
:mod:`.ace.stepped`), Verilator or Icarus through cocotb (:mod:`.cocotb`, :mod:`.ace.remote`,
:mod:`.ace.cocotb_server`, over the request plumbing of :mod:`.remote`), the build-and-run harness behind them
(:mod:`.harness`), the endpoint memory models (:mod:`.axi_model`, :mod:`.backdoor`), the system runs of
``syncfabric run`` (:mod:`.ace`, whole or in partitions: :mod:`.ace.partition`) and the COARSE system
(:mod:`.coarse`). The transport interface itself is :mod:`syncfabric.host.transport`; boards over serial
:mod:`syncfabric.host.serial`."""
