"""Pure translation between the two chat dialects and the canonical model. No I/O."""
