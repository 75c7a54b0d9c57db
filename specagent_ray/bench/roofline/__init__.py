"""The roofline probe: decode, verify-prefill and verdict costs of random-weight decoders on this device."""
