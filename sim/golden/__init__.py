"""syncfabric.sim.golden."""
