//! The step's inputs for the shell's own changes of the core, outside a client's request:
//! a command's start and end as the shell's dispatcher runs them (`cmd_active`), a
//! `--for-pid` slot's, a connection's last command, its restriction flags and killpath,
//! a held lease's value block (SET_LVB), and ADD_LOCKSPACE's admission and listing
//! ([`Core::add_space`] too). Each is one transition of the tables or the lockspaces; those
//! with a value answer it as the step's one effect ([`Effect::Answer`]).
//!
//! Invariant: the shell changes the core only by stepping it; these inputs are the
//! transitions it once called on the tables directly.

use std::collections::BTreeMap;

use disk_format::Name;
use lease_core::monitor::HostMonitor;

use crate::clients::{ClientToken, KillPath, LeaseHold};
use crate::io::{Answer, Effect, ListRefused, SpaceListing, SpacePlace};
use crate::space_state::{Phase, SpaceSt};
use crate::tables::{CommandTarget, Key};

use super::{Core, CoreSpace, MAX_GONE_SPACES};

impl<S, H: LeaseHold> Core<S, H> {
    /// The shell lists a lockspace it is adding (its join runs in the shell): the core
    /// keeps its status from now on, under `id`. The shell lists at most one lockspace of
    /// a name that is not gone, and never an id twice (asserted: a broken invariant, not
    /// input — the daemon checks ADD_LOCKSPACE's name under the same lock first). Before
    /// the new entry, the oldest gone entries are pruned down to `MAX_GONE_SPACES - 1`,
    /// so at most [`MAX_GONE_SPACES`] exist once this one has gone too.
    pub fn add_space(&mut self, id: u32, name: Name, io_timeout_s: u64) {
        let monitor = HostMonitor::new(0, self.watchdog_fire_s);
        self.insert_listed(id, name, None, io_timeout_s, monitor);
    }

    /// [`crate::Input::ListSpace`], ADD_LOCKSPACE's admission, then the listing: the shell is adding lockspace `name`
    /// under `id`, with its delta leases at `place`. Refused, with nothing listed, when a
    /// lockspace here (not gone) has that name — being removed, being added or joined
    /// at the same place, or at another place — or another name on the same disk area
    /// (path and offset), in the order they were added (sanlock's `add_lockspace_start`
    /// checks). Otherwise listed as by [`Core::add_space`].
    pub(super) fn list_space(&mut self, l: SpaceListing) -> Effect<H> {
        let admitted = self.admission(&l.name, &l.place);
        if admitted.is_ok() {
            self.insert_listed(l.id, l.name, Some(l.place), l.io_timeout_s, l.monitor);
        }
        Effect::Answer(Answer::Listed(admitted))
    }

    /// Whether lockspace `name` may be listed with its delta leases at `place`
    /// ([`Core::list_space`]).
    fn admission(&self, name: &Name, place: &SpacePlace) -> Result<(), ListRefused> {
        for s in self.spaces.iter().filter(|s| !s.st.gone) {
            let same_disk = s
                .place
                .as_ref()
                .is_some_and(|p| p.path == place.path && p.offset == place.offset);
            if s.name.same_as(name) {
                let identical =
                    same_disk && s.place.as_ref().map(|p| p.host_id) == Some(place.host_id);
                return Err(match s.st.phase {
                    Phase::Removing => ListRefused::BeingRemoved,
                    Phase::Adding if identical => ListRefused::BeingAdded,
                    Phase::Joined if identical => ListRefused::Joined,
                    _ => ListRefused::OtherPlace,
                });
            }
            if same_disk {
                return Err(ListRefused::DiskAreaTaken);
            }
        }
        Ok(())
    }

    fn insert_listed(
        &mut self,
        id: u32,
        name: Name,
        place: Option<SpacePlace>,
        io_timeout_s: u64,
        monitor: HostMonitor,
    ) {
        assert!(
            self.space(&name).is_none() && self.spaces.iter().all(|s| s.id != id),
            "lockspace {name:?} (id {id}) listed twice"
        );
        let gone = self.spaces.iter().filter(|s| s.st.gone).count();
        let mut prune = gone.saturating_sub(MAX_GONE_SPACES - 1);
        self.spaces.retain(|s| {
            let drop_it = prune > 0 && s.st.gone;
            prune -= usize::from(drop_it);
            !drop_it
        });
        self.spaces.push(CoreSpace {
            id,
            name,
            st: SpaceSt::default(),
            io_timeout_s,
            listed_by_shell: true,
            place,
            monitor,
            fence: None,
            last_examine: BTreeMap::new(),
        });
    }

    /// [`crate::Input::StartCommand`].
    pub(super) fn start_command(&mut self, target: CommandTarget) -> Effect<H> {
        Effect::Answer(Answer::CommandStarted(self.tables.start_command(target)))
    }

    /// [`crate::Input::FinishCommand`].
    pub(super) fn finish_command(&mut self, target: u32) -> Effect<H> {
        Effect::Answer(Answer::CommandFinished(self.tables.finish_command(target)))
    }

    /// [`crate::Input::SetKillpath`].
    pub(super) fn set_killpath(&mut self, ci: u32, killpath: KillPath) -> Effect<H> {
        Effect::Answer(Answer::KillpathSet(self.tables.set_killpath(ci, killpath)))
    }

    /// [`crate::Input::AddPidClient`].
    pub(super) fn pid_slot(&mut self, pid: i32, uid: u32, killpath: Option<KillPath>) -> Effect<H> {
        let added = self.tables.add_pid_client(pid, uid, killpath);
        Effect::Answer(Answer::PidClientAdded(added))
    }

    /// [`crate::Input::ReleaseTokens`]: each token the shell took from client `ci` is
    /// released (a disk release for the last holder's; an orphan when `dying` and
    /// persistent).
    pub(super) fn release_tokens(
        &mut self,
        ci: u32,
        tokens: &[ClientToken],
        dying: bool,
        fx: &mut Vec<Effect<H>>,
    ) {
        for t in tokens {
            self.release_token(ci, t, dying, None, None, fx);
        }
    }

    /// [`crate::Input::DropFailedPidClient`].
    pub(super) fn drop_failed_pid_client(&mut self, ci: u32) -> Effect<H> {
        Effect::Answer(Answer::PidClientDropped(
            self.tables.drop_failed_pid_client(ci),
        ))
    }

    /// [`crate::Input::SetLvb`]: the value block of the lease held as `key`, in its on-disk
    /// state ([`LeaseHold::set_lvb`]).
    pub(super) fn set_lvb(&mut self, key: &Key, lvb: &[u8]) -> Effect<H> {
        let set = self
            .tables
            .change_held(key, |held| held.set_lvb(lvb))
            .flatten();
        Effect::Answer(Answer::LvbSet(set))
    }
}
