"""COARSE memory device RTL: sync cores, the CCI transaction layer, the device and the system top."""
