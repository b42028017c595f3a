//! The sanlock client protocol: wire codec shared by the lockd daemon and its clients.
//!
//! - [`proto`]: command numbers, flags and limits (`sanlock_sock.h` and friends);
//! - [`wire`]: native-endian encode/decode of every struct sent on the socket;
//! - [`client`]: a small blocking client;
//! - [`ext`]: lockd's protocol extensions (lease-loss watch, leader query);
//! - [`request`]: every request the daemon handles as a typed [`Request`], read from a
//!   header and payload source exactly as sanlock reads it, and encoded back;
//! - [`lease`] and [`election`]: a typed lease with fencing token and loss notification,
//!   and leader election on top of it (lockd daemons only: they use [`ext`]).
//!
//! Invariant: nothing here panics on bytes received from a peer; every decoder returns a
//! [`WireError`] naming what was short, oversized or invalid.
#![forbid(unsafe_code)]

pub mod client;
pub mod election;
pub mod error;
pub mod ext;
pub mod lease;
pub mod proto;
pub mod request;
pub mod wire;

pub use client::{default_run_dir, Client, StateRecord};
pub use election::{LeaderElection, Leadership};
pub use error::{describe_rv, ClientError, WireError};
pub use ext::LeaderInfo;
pub use lease::{
    ClientLeaseError, Lease, LeaseAcquireOptions, LeaseSpec, LossNotice, LossReason, Wait,
};
pub use request::{read_request, PayloadSource, ReleaseWhat, Request, RequestError};
pub use wire::{
    DiskLocation, EventCb, Header, Host, HostEvent, Lockspace, Options, PathField, Rentry,
    Resource, ResourceHead, Rindex, State,
};
