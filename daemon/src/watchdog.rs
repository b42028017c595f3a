//! The lockspace's link to wdmd: one connection per lockspace, as sanlock keeps.
//!
//! Sequence (and the invariant it protects — a host that stops renewing is reset before
//! another host may take its leases):
//! 1. [`LockspaceWatchdog::open`] before the delta lease is acquired: connect and ask
//!    wdmd for the device with our fire timeout W (3.9's OPEN_WATCHDOG; a 3.8 wdmd that
//!    never answers is accepted, its STATUS is checked later);
//! 2. [`LockspaceWatchdog::arm`] right after the delta lease is acquired and *before*
//!    any client may hold a lease in the lockspace: REGISTER, REFCOUNT_SET, STATUS (wdmd's
//!    fire timeout must equal W, or the lockspace fails with `SANLK_WD_ERROR`), then the
//!    first TEST_LIVE with expiry = renewal + id_renewal_fail;
//! 3. [`LockspaceWatchdog::renewed`] after every successful renewal;
//! 4. [`LockspaceWatchdog::disarm`] only once no holder is left: TEST_LIVE(0, 0) and
//!    REFCOUNT_CLEAR. Dropping an armed watchdog without disarming leaves wdmd testing
//!    the last expiry, so the host is reset if it stops renewing — on purpose.

use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;
use wdmd::client::{OpenWatchdog, WdmdClient, WdmdClientError};

/// How long to wait for a 3.9 OPEN_WATCHDOG reply before treating wdmd as 3.8.
const OPEN_REPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// Failures of the wdmd link; all map to `SANLK_WD_ERROR` at the protocol edge.
#[derive(Debug, Error)]
pub enum WatchdogError {
    #[error("wdmd at {run_dir}")]
    Client {
        run_dir: PathBuf,
        #[source]
        source: WdmdClientError,
    },
    #[error("wdmd refused to open the watchdog with fire timeout {fire_timeout_s}s")]
    Refused { fire_timeout_s: u32 },
    #[error("wdmd uses fire timeout {theirs}s but this host is configured for {ours}s; all hosts must agree")]
    FireTimeoutMismatch { ours: u32, theirs: u32 },
}

impl WatchdogError {
    /// The code clients see.
    pub fn sanlk_code(&self) -> i32 {
        disk_format::rv::SANLK_WD_ERROR
    }
}

/// One lockspace's wdmd connection.
pub struct LockspaceWatchdog {
    client: WdmdClient,
    run_dir: PathBuf,
    fire_timeout_s: u32,
    armed: bool,
}

impl LockspaceWatchdog {
    fn wrap(&self, source: WdmdClientError) -> WatchdogError {
        WatchdogError::Client {
            run_dir: self.run_dir.clone(),
            source,
        }
    }

    /// Step 1: connect and request the device.
    pub fn open(run_dir: &Path, fire_timeout_s: u32) -> Result<LockspaceWatchdog, WatchdogError> {
        let client = WdmdClient::connect(run_dir).map_err(|source| WatchdogError::Client {
            run_dir: run_dir.to_path_buf(),
            source,
        })?;
        let mut wd = LockspaceWatchdog {
            client,
            run_dir: run_dir.to_path_buf(),
            fire_timeout_s,
            armed: false,
        };
        match wd.client.open_watchdog(fire_timeout_s, OPEN_REPLY_TIMEOUT) {
            Ok(OpenWatchdog::Granted(t)) if t == fire_timeout_s => Ok(wd),
            Ok(OpenWatchdog::Granted(t)) => Err(WatchdogError::FireTimeoutMismatch {
                ours: fire_timeout_s,
                theirs: t,
            }),
            Ok(OpenWatchdog::Refused) => Err(WatchdogError::Refused { fire_timeout_s }),
            // A 3.8 wdmd: STATUS in `arm` checks the fire timeout.
            Ok(OpenWatchdog::NoReply) => Ok(wd),
            Err(e) => Err(wd.wrap(e)),
        }
    }

    /// Step 2: register this lockspace and arm it with its first expiry.
    pub fn arm(
        &mut self,
        lockspace: &str,
        host_id: u64,
        renewal_s: u64,
        expire_s: u64,
    ) -> Result<(), WatchdogError> {
        let name = format!("lockd_{lockspace}:{host_id}");
        self.client.register(&name).map_err(|e| self.wrap(e))?;
        self.client.refcount_set().map_err(|e| self.wrap(e))?;
        let status = self.client.status().map_err(|e| self.wrap(e))?;
        if status.fire_timeout != self.fire_timeout_s {
            return Err(WatchdogError::FireTimeoutMismatch {
                ours: self.fire_timeout_s,
                theirs: status.fire_timeout,
            });
        }
        self.client
            .test_live(renewal_s, expire_s)
            .map_err(|e| self.wrap(e))?;
        self.armed = true;
        Ok(())
    }

    /// Step 3: a renewal succeeded at `renewal_s`; the host must be reset at `expire_s`
    /// unless another renewal follows.
    pub fn renewed(&mut self, renewal_s: u64, expire_s: u64) -> Result<(), WatchdogError> {
        self.client
            .test_live(renewal_s, expire_s)
            .map_err(|e| self.wrap(e))
    }

    /// Step 4: no holder is left; stop protecting this lockspace.
    pub fn disarm(mut self) -> Result<(), WatchdogError> {
        if self.armed {
            self.client.test_live(0, 0).map_err(|e| self.wrap(e))?;
            self.client.refcount_clear().map_err(|e| self.wrap(e))?;
            self.armed = false;
        }
        Ok(())
    }
}
