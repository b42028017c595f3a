//! sd_notify: `READY=1` / `STATUS=...` datagrams to `$NOTIFY_SOCKET` when it is set.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;

/// A notifier; does nothing when NOTIFY_SOCKET was not set.
pub struct Notifier {
    target: Option<String>,
}

impl Notifier {
    pub fn from_env() -> Notifier {
        Notifier {
            target: std::env::var("NOTIFY_SOCKET")
                .ok()
                .filter(|s| !s.is_empty()),
        }
    }

    /// Sends one notification (e.g. "READY=1\nSTATUS=..."); errors are logged, not fatal.
    pub fn notify(&self, text: &str) {
        let Some(target) = &self.target else { return };
        let res = (|| -> std::io::Result<()> {
            let sock = UnixDatagram::unbound()?;
            if let Some(abs) = target.strip_prefix('@') {
                let addr = SocketAddr::from_abstract_name(abs.as_bytes())?;
                sock.send_to_addr(text.as_bytes(), &addr)?;
            } else {
                sock.send_to(text.as_bytes(), PathBuf::from(target))?;
            }
            Ok(())
        })();
        if let Err(e) = res {
            tracing::warn!(socket = %target, error = %e, "sd_notify failed");
        }
    }
}
