"""syncfabric.tb."""
