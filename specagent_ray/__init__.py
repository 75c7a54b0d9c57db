"""SpecAgent: trajectory-level speculation with semantic verification, served on Ray."""
