//! Deterministic model of TCP stacks producing traces (pure)
