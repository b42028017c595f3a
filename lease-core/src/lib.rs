//! Delta leases and disk Paxos (sanlock-compatible), with no I/O and no clock of its own.
#![forbid(unsafe_code)]
