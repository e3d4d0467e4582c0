"""ina: in-network aggregation of THC-compressed gradients for torch DDP."""
