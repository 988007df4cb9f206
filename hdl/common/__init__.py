"""syncfabric.hdl.common."""
