//! Leader election over one resource lease, modelled on etcd's election API (campaign,
//! leader, observe, resign) and on spindle (has-lock plus a fencing token).
//!
//! The leader is whoever holds the lease. A candidate campaigns by acquiring it: the
//! daemon answers at once while a live host holds it (we then back off, 200 ms doubling
//! to 2 s, never a hot loop), and when the holder's host stops renewing, the daemon's
//! acquire waits inside the daemon until that host is dead (host_dead seconds after our
//! daemon last saw it renew) and returns at that moment — so a candidate takes over within
//! host_dead plus its daemon's observation lag (≤ 2·io_timeout) plus one back-off step.
//!
//! Invariants: at most one [`Leadership`] exists for a lease at any time across all hosts
//! (disk Paxos); each new leader's token is strictly greater than every earlier one's; a
//! leadership whose lease is lost stays lost (`is_leader()` false) — a leader that is told
//! it lost must stop acting, and stores that check tokens reject it if it does not.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::ext::LeaderInfo;
use crate::lease::{
    self, ClientLeaseError, Lease, LeaseAcquireOptions, LeaseSpec, LossNotice, Wait,
};

/// One election: a lease and the daemon to go through.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    spec: LeaseSpec,
    run_dir: PathBuf,
    owner_name: Option<String>,
    restrict: u32,
}

/// The leadership a successful campaign gives (holds the lease; dropping it resigns).
#[derive(Debug)]
pub struct Leadership {
    lease: Lease,
}

impl Leadership {
    /// The fencing token: greater than every earlier leader's.
    pub fn token(&self) -> u64 {
        self.lease.token()
    }

    /// spindle's HasLock: true until a loss notice arrives.
    pub fn is_leader(&self) -> bool {
        self.lease.is_trusted()
    }

    /// Blocks until leadership is lost or `timeout` passes.
    pub fn wait_lost(&self, timeout: Option<Duration>) -> Option<LossNotice> {
        self.lease.wait_lost(timeout)
    }

    /// Calls `f` once when leadership is lost.
    pub fn on_lost(&self, f: impl FnOnce(LossNotice) + Send + 'static) {
        self.lease.on_lost(f)
    }

    /// The underlying lease.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// etcd's Resign: gives the lease up so another candidate can take it.
    pub fn resign(self) -> Result<(), ClientLeaseError> {
        self.lease.release()
    }
}

impl LeaderElection {
    /// An election on `spec` through the daemon in `run_dir`.
    pub fn new(spec: LeaseSpec, run_dir: &Path) -> LeaderElection {
        LeaderElection {
            spec,
            run_dir: run_dir.to_path_buf(),
            owner_name: None,
            restrict: 0,
        }
    }

    /// `SANLK_RESTRICT_*` flags for our registration (see [`LeaseAcquireOptions::restrict`]).
    pub fn with_restrict(mut self, flags: u32) -> LeaderElection {
        self.restrict = flags;
        self
    }

    /// The owner name the daemon shows for our lease.
    pub fn with_owner_name(mut self, name: &str) -> LeaderElection {
        self.owner_name = Some(name.to_string());
        self
    }

    pub fn spec(&self) -> &LeaseSpec {
        &self.spec
    }

    /// etcd's Campaign: blocks until we are the leader (or `timeout` passes).
    pub fn campaign(&self, timeout: Option<Duration>) -> Result<Leadership, ClientLeaseError> {
        let opts = LeaseAcquireOptions {
            run_dir: self.run_dir.clone(),
            shared: false,
            wait: match timeout {
                Some(t) => Wait::Timeout(t),
                None => Wait::Forever,
            },
            owner_name: self.owner_name.clone(),
            restrict: self.restrict,
            lvb: false,
            ..LeaseAcquireOptions::default()
        };
        Ok(Leadership {
            lease: Lease::acquire(&self.spec, &opts)?,
        })
    }

    /// etcd's Leader: who holds the lease now (host_id 0 when nobody does).
    pub fn leader(&self) -> Result<LeaderInfo, ClientLeaseError> {
        lease::leader(&self.run_dir, &self.spec)
    }

    /// etcd's Observe: calls `f` with the leader at start and at every change of holder,
    /// token or holder state, polling every `interval`, until `f` returns false or `stop`
    /// is set.
    pub fn observe(
        &self,
        interval: Duration,
        stop: &AtomicBool,
        mut f: impl FnMut(&LeaderInfo) -> bool,
    ) -> Result<(), ClientLeaseError> {
        let mut last: Option<LeaderInfo> = None;
        while !stop.load(Ordering::SeqCst) {
            let now = self.leader()?;
            if last != Some(now) {
                if !f(&now) {
                    return Ok(());
                }
                last = Some(now);
            }
            std::thread::sleep(interval);
        }
        Ok(())
    }

    /// Campaigns, leads and campaigns again until `stop` is set: `on_elected` runs when
    /// we become leader and should return when it is done leading or when the leadership
    /// is no longer trusted; `on_lost` runs with the notice when leadership was lost.
    /// Returns when `stop` is set (resigning if leading).
    pub fn run(
        &self,
        stop: &AtomicBool,
        mut on_elected: impl FnMut(&Leadership),
        mut on_lost: impl FnMut(LossNotice),
    ) -> Result<(), ClientLeaseError> {
        while !stop.load(Ordering::SeqCst) {
            let leadership = match self.campaign(Some(Duration::from_secs(1))) {
                Ok(l) => l,
                Err(ClientLeaseError::Timeout { .. }) => continue,
                Err(e) => return Err(e),
            };
            on_elected(&leadership);
            if let Some(n) = leadership.lease.lost() {
                on_lost(n);
                // Back off for a moment: our daemon may still be cleaning up.
                let until = Instant::now() + Duration::from_secs(1);
                while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            } else {
                let _ = leadership.resign();
            }
        }
        Ok(())
    }
}
