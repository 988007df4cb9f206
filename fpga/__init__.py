"""syncfabric.fpga."""
