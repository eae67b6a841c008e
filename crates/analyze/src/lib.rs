//! Flows, stalls and their causes, wire cost (pure)
