//! The sanlock client protocol: wire codec shared by the lockd daemon and its clients.
#![forbid(unsafe_code)]
