"""syncfabric.sim."""
