"""syncfabric.host."""
