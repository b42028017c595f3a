//! Test doubles: an instant in-memory disk with scripted interference, and a clock whose
//! sleeps advance time at once. Futures over them never return `Pending`.

use std::cell::{Cell, RefCell};
use std::future::{ready, Future};

use disk_format::area::{format_lockspace_area, format_resource_area, ResourceInit};
use disk_format::{Geometry, Name};

use crate::delta::LockspaceParams;
use crate::io::{Clock, Disk, IoError};
use crate::paxos::ResourceParams;

/// Lockspace at 0, resource at 1 MiB, 512/1M.
pub const RES_OFFSET: u64 = 1 << 20;

pub struct MemDisk {
    pub bytes: RefCell<Vec<u8>>,
    ops: Cell<u64>,
    /// Bytes read so far.
    pub bytes_read: Cell<u64>,
    /// After op number `n` (1-based, reads and writes), write these bytes.
    injections: RefCell<Vec<(u64, u64, Vec<u8>)>>,
    /// Fail every write at these byte offsets.
    pub fail_writes_at: RefCell<Vec<u64>>,
    /// Every operation fails with this (a dead or stalled disk) while set.
    pub fail_all: Cell<Option<IoError>>,
}

impl MemDisk {
    pub fn new(len: usize) -> MemDisk {
        MemDisk {
            bytes: RefCell::new(vec![0; len]),
            ops: Cell::new(0),
            bytes_read: Cell::new(0),
            injections: RefCell::new(Vec::new()),
            fail_writes_at: RefCell::new(Vec::new()),
            fail_all: Cell::new(None),
        }
    }

    /// A disk with lockspace "ls" at 0 and resource "res" (num_hosts 8) at 1 MiB.
    pub fn formatted() -> MemDisk {
        let g = Geometry::ALL[0];
        let d = MemDisk::new(2 << 20);
        let f = format_lockspace_area(g, &Name::new("ls").unwrap(), 1);
        d.put(0, &f.area);
        d.put(0, &f.first_sector);
        let area = format_resource_area(&ResourceInit {
            geometry: g,
            space_name: Name::new("ls").unwrap(),
            resource_name: Name::new("res").unwrap(),
            num_hosts: 8,
            clear_at_monotime_s: None,
        });
        d.put(RES_OFFSET, &area);
        d
    }

    pub fn put(&self, offset: u64, data: &[u8]) {
        let o = offset as usize;
        self.bytes.borrow_mut()[o..o + data.len()].copy_from_slice(data);
    }

    pub fn get(&self, offset: u64, len: usize) -> Vec<u8> {
        let o = offset as usize;
        self.bytes.borrow()[o..o + len].to_vec()
    }

    pub fn ops(&self) -> u64 {
        self.ops.get()
    }

    /// Writes `data` at `offset` right after the `after_op`-th operation from now.
    pub fn inject_after(&self, after_op: u64, offset: u64, data: Vec<u8>) {
        self.injections
            .borrow_mut()
            .push((self.ops.get() + after_op, offset, data));
    }

    fn tick(&self) {
        let n = self.ops.get() + 1;
        self.ops.set(n);
        let due: Vec<(u64, u64, Vec<u8>)> = {
            let mut inj = self.injections.borrow_mut();
            let (due, keep) = inj.drain(..).partition(|(k, _, _)| *k == n);
            *inj = keep;
            due
        };
        for (_, off, data) in due {
            self.put(off, &data);
        }
    }
}

impl Disk for MemDisk {
    type Buf = Vec<u8>;

    fn read(
        &self,
        offset: u64,
        len: usize,
        _timeout_ms: u64,
    ) -> impl Future<Output = Result<Vec<u8>, IoError>> {
        let o = offset as usize;
        let r = match self.fail_all.get() {
            Some(e) => Err(e),
            None => self
                .bytes
                .borrow()
                .get(o..o + len)
                .map(<[u8]>::to_vec)
                .ok_or(IoError::Failed),
        };
        self.bytes_read.set(self.bytes_read.get() + len as u64);
        self.tick();
        ready(r)
    }

    fn write(
        &self,
        offset: u64,
        data: &[u8],
        _timeout_ms: u64,
    ) -> impl Future<Output = Result<(), IoError>> {
        let r = if let Some(e) = self.fail_all.get() {
            Err(e)
        } else if self.fail_writes_at.borrow().contains(&offset) {
            Err(IoError::Failed)
        } else {
            self.put(offset, data);
            Ok(())
        };
        self.tick();
        ready(r)
    }
}

pub struct TestClock {
    pub now_ms: Cell<u64>,
    pub slept_ms: Cell<u64>,
    /// Each sleep of `ms` moves the clock by `ms * factor` (a host stalled meanwhile).
    pub sleep_factor: Cell<u64>,
}

impl TestClock {
    pub fn at_s(s: u64) -> TestClock {
        TestClock {
            now_ms: Cell::new(s * 1000),
            slept_ms: Cell::new(0),
            sleep_factor: Cell::new(1),
        }
    }

    /// Makes every later sleep last `factor` times as long on the clock.
    pub fn stretch_sleeps(&self, factor: u64) {
        self.sleep_factor.set(factor);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.get()
    }

    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()> {
        self.now_ms
            .set(self.now_ms.get() + ms * self.sleep_factor.get());
        self.slept_ms.set(self.slept_ms.get() + ms);
        ready(())
    }

    fn random_below(&self, _n: u64) -> u64 {
        0
    }
}

pub fn ls_params(host_id: u64, name: &str) -> LockspaceParams {
    LockspaceParams {
        space_name: Name::new("ls").unwrap(),
        disk_offset: 0,
        geometry: Geometry::ALL[0],
        host_id,
        host_name: Name::new(name).unwrap(),
        io_timeout: 1,
        watchdog_fire: 10,
        monitor_hosts: Some(8),
    }
}

pub fn res_params() -> ResourceParams {
    ResourceParams {
        space_name: Name::new("ls").unwrap(),
        resource_name: Name::new("res").unwrap(),
        disk_offset: RES_OFFSET,
        geometry: Geometry::ALL[0],
        io_timeout: 1,
        num_hosts_hint: 8,
    }
}
