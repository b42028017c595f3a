//! Shared helpers for the system tests (loop devices, sanlock processes, temp areas).
