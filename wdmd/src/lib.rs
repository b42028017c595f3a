//! Watchdog multiplexer.
