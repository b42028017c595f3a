//! The deterministic multi-host simulator (see `docs/algorithms.md`).
