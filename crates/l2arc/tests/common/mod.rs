//! Shared test helper: `Hooked`, a cache device that passes every call to a file device
//! and asks a hook first what to do with each read and write (fail it, delay it, cut it
//! short or lose it), for the devices going bad, slow or killed mid-write of the cache
//! tests. The pool's cache tests include it too (it names only `tarn_vdev`).
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tarn_vdev::{BlockDevice, FileDevice};

/// One call a `Hooked` device is asked for.
#[derive(Clone, Copy, Debug)]
pub enum Io {
    Read { offset: u64, len: usize },
    Write { offset: u64, len: usize },
}

/// What a `Hooked` device does with one read or write.
#[derive(Clone, Copy, Debug)]
pub enum Then {
    /// Passes it to the inner device.
    Pass,
    /// Fails it with an injected error (a device going bad or pulled out).
    Fail,
    /// Waits this long, then passes it (a slow device).
    Delay(Duration),
    /// Writes only this many leading bytes and reports success: a write cut short by a
    /// kill (Linux ends a buffered write between pages), or lost with the process (0).
    /// A read is passed whole.
    Keep(usize),
}

/// A device that forwards every call to `inner`, each read and write as its hook says.
pub struct Hooked {
    pub inner: FileDevice,
    hook: Box<dyn Fn(Io) -> Then + Send + Sync>,
}

impl Hooked {
    pub fn new(inner: FileDevice, hook: impl Fn(Io) -> Then + Send + Sync + 'static) -> Hooked {
        Hooked { inner, hook: Box::new(hook) }
    }
}

/// The hook of a device that fails every read and write once `flag` is set (a device
/// going bad, or pulled out of the machine, mid-run).
pub fn fail_all_when(flag: &Arc<AtomicBool>) -> impl Fn(Io) -> Then + Send + Sync + 'static {
    let flag = flag.clone();
    move |_| if flag.load(Ordering::Relaxed) { Then::Fail } else { Then::Pass }
}

impl BlockDevice for Hooked {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match (self.hook)(Io::Read { offset, len: buf.len() }) {
            Then::Fail => return Err(std::io::Error::other("injected read error")),
            Then::Delay(d) => std::thread::sleep(d),
            Then::Pass | Then::Keep(_) => {}
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        match (self.hook)(Io::Write { offset, len: buf.len() }) {
            Then::Pass => self.inner.write_at(buf, offset),
            Then::Fail => Err(std::io::Error::other("injected write error")),
            Then::Delay(d) => {
                std::thread::sleep(d);
                self.inner.write_at(buf, offset)
            }
            Then::Keep(0) => Ok(()),
            Then::Keep(n) => self.inner.write_at(&buf[..n.min(buf.len())], offset),
        }
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn release(&self) {
        self.inner.release()
    }
    fn read_align(&self) -> u64 {
        self.inner.read_align()
    }
}
