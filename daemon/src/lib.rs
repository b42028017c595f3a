//! The lockd daemon.
