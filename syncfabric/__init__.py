"""syncfabric: open hardware for offloading collective communication in distributed training.

The top-level folders of the repository are mapped onto this namespace by ``pyproject.toml``:
``hdl/`` -> :mod:`syncfabric.hdl`, ``sim/`` -> :mod:`syncfabric.sim`, ``host/`` -> :mod:`syncfabric.host`,
``tb/`` -> :mod:`syncfabric.tb`, ``fpga/`` -> :mod:`syncfabric.fpga`.
"""

__version__ = "0.1.0"
