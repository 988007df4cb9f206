"""cocotb testbenches of the COARSE memory devices."""
