"""THC (Tensor Homomorphic Compression) codec, imported as ``ina.compression``."""
