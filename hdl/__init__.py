"""syncfabric.hdl."""
