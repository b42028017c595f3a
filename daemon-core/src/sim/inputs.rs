//! Which kinds of [`Input`] a run fed to [`Core::step`](crate::Core::step): the
//! simulator's coverage of the core's inputs (`inputs=K/N` on `lockd-daemon-sim`'s last
//! line). The list below is matched exhaustively, so a new `Input` variant does not
//! compile until it is named here.

use crate::io::Input;

macro_rules! input_kinds {
    ($($kind:ident),* $(,)?) => {
        /// The names of the `Input` variants, in the order of their bits.
        pub const INPUT_KINDS: &[&str] = &[$(stringify!($kind)),*];

        #[allow(clippy::enum_variant_names)]
        #[derive(Clone, Copy)]
        enum Kind {
            $($kind),*
        }

        /// The bit of `input`'s kind in [`DaemonSimStats::inputs`](super::DaemonSimStats::inputs).
        pub(super) fn input_bit<S, H>(input: &Input<S, H>) -> u64 {
            let kind = match input {
                $(Input::$kind { .. } => Kind::$kind),*
            };
            1 << kind as u32
        }
    };
}

input_kinds!(
    Tick,
    HostsRead,
    FenceRegistered,
    FenceUnregistered,
    FenceLook,
    FenceKeysRead,
    PeerFenceDone,
    RenewalOk,
    RenewalFailed,
    JoinStarted,
    RenewalStarted,
    DeltaReleasing,
    Connected,
    Request,
    Command,
    DiskDone,
    JoinDone,
    Closed,
    Examined,
    ReleaseTokens,
    ReleaseOrphans,
    KillpathEnded,
    JoinEnded,
    SetConfig,
    LockspaceEnded,
    Shutdown,
    RequestWritten,
    WatchTick,
    WatchDropped,
    NoteCommand,
    SetRestrict,
    SetKillpath,
    StartCommand,
    FinishCommand,
    AddPidClient,
    DropFailedPidClient,
    ListSpace,
    SetLvb,
);

const _: () = assert!(INPUT_KINDS.len() <= 64, "one bit per kind in a u64");

/// The names of the kinds whose bits are not in `reached`.
pub fn kinds_missing(reached: u64) -> Vec<&'static str> {
    INPUT_KINDS
        .iter()
        .enumerate()
        .filter(|(i, _)| reached & (1 << i) == 0)
        .map(|(_, n)| *n)
        .collect()
}
