//! Random operations through a real `tarn mount`, checked against an in-memory model:
//! pwrite/pread at random offsets, truncate, punch hole, rename (also over a file),
//! hard links, unlink, mkdir/rmdir, fsync, and unmount/remount in between.
//! The seed is printed; rerun one with TARN_SEED=N.

mod common;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const NAMES: &[&str] = &["a", "b", "c", "d", "sub/e", "sub/f"];

#[derive(Default)]
struct Model {
    /// name → inode
    names: BTreeMap<String, u64>,
    /// inode → content
    data: BTreeMap<u64, Vec<u8>>,
    next: u64,
    sub: bool,
}

impl Model {
    fn content(&mut self, name: &str) -> &mut Vec<u8> {
        let ino = match self.names.get(name) {
            Some(i) => *i,
            None => {
                self.next += 1;
                self.names.insert(name.to_string(), self.next);
                self.next
            }
        };
        self.data.entry(ino).or_default()
    }

    fn drop_name(&mut self, name: &str) {
        if let Some(ino) = self.names.remove(name) {
            if !self.names.values().any(|&i| i == ino) {
                self.data.remove(&ino);
            }
        }
    }
}

fn step(rng: &mut StdRng, m: &common::Mounted, model: &mut Model, log: &mut Vec<String>) {
    let name = NAMES[rng.gen_range(0..NAMES.len())];
    if name.starts_with("sub/") && !model.sub {
        fs::create_dir(m.p("sub")).expect("mkdir sub");
        model.sub = true;
        log.push("mkdir sub".into());
        return;
    }
    let path = m.p(name);
    match rng.gen_range(0..100) {
        0..=34 => {
            let off = rng.gen_range(0..200_000u64);
            let len = rng.gen_range(1..40_000usize);
            let byte: u8 = rng.gen();
            log.push(format!("write {name} off={off} len={len}"));
            let f = OpenOptions::new().write(true).create(true).truncate(false).open(&path).expect("open for write");
            f.write_all_at(&vec![byte; len], off).expect("pwrite");
            let c = model.content(name);
            let end = off as usize + len;
            if c.len() < end {
                c.resize(end, 0);
            }
            c[off as usize..end].fill(byte);
        }
        35..=54 => {
            log.push(format!("read {name}"));
            let Some(ino) = model.names.get(name) else {
                assert!(!path.exists(), "{name} exists but the model has no such file; ops: {log:?}");
                return;
            };
            let want = &model.data[ino];
            let off = rng.gen_range(0..=want.len() as u64);
            let len = rng.gen_range(0..50_000usize);
            let f = fs::File::open(&path).expect("open for read");
            let mut buf = vec![0u8; len];
            let mut got = 0;
            while got < len {
                let n = f.read_at(&mut buf[got..], off + got as u64).expect("pread");
                if n == 0 {
                    break;
                }
                got += n;
            }
            let end = (off as usize + len).min(want.len());
            assert!(buf[..got] == want[off as usize..end], "read {name} at {off}+{len} differs; ops: {log:?}");
        }
        55..=62 => {
            if !model.names.contains_key(name) {
                return;
            }
            let size = rng.gen_range(0..250_000u64);
            log.push(format!("truncate {name} {size}"));
            OpenOptions::new().write(true).open(&path).expect("open").set_len(size).expect("ftruncate");
            model.content(name).resize(size as usize, 0);
        }
        63..=67 => {
            if !model.names.contains_key(name) {
                return;
            }
            let off = rng.gen_range(0..200_000u64);
            let len = rng.gen_range(1..100_000u64);
            log.push(format!("punch {name} {off}+{len}"));
            let f = OpenOptions::new().write(true).open(&path).expect("open");
            // SAFETY: plain syscall on an fd we own.
            let rc = unsafe {
                libc::fallocate(
                    f.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off as i64,
                    len as i64,
                )
            };
            assert_eq!(rc, 0, "punch hole: {}", std::io::Error::last_os_error());
            let c = model.content(name);
            let end = ((off + len) as usize).min(c.len());
            if (off as usize) < end {
                c[off as usize..end].fill(0);
            }
        }
        68..=76 => {
            let to = NAMES[rng.gen_range(0..NAMES.len())];
            if !model.names.contains_key(name) || (to.starts_with("sub/") && !model.sub) {
                return;
            }
            log.push(format!("rename {name} {to}"));
            fs::rename(&path, m.p(to)).expect("rename");
            if name != to && model.names.get(name) != model.names.get(to) {
                let ino = model.names[name];
                model.drop_name(to);
                model.names.remove(name);
                model.names.insert(to.to_string(), ino);
            }
        }
        77..=82 => {
            let to = NAMES[rng.gen_range(0..NAMES.len())];
            if !model.names.contains_key(name) || model.names.contains_key(to) || (to.starts_with("sub/") && !model.sub)
            {
                return;
            }
            log.push(format!("link {name} {to}"));
            fs::hard_link(&path, m.p(to)).expect("link");
            let ino = model.names[name];
            model.names.insert(to.to_string(), ino);
        }
        83..=90 => {
            if !model.names.contains_key(name) {
                return;
            }
            log.push(format!("unlink {name}"));
            fs::remove_file(&path).expect("unlink");
            model.drop_name(name);
        }
        91..=95 => {
            if !model.names.contains_key(name) {
                return;
            }
            log.push(format!("fsync {name}"));
            fs::File::open(&path).expect("open").sync_all().expect("fsync");
        }
        _ => {
            if model.sub && !model.names.keys().any(|n| n.starts_with("sub/")) {
                log.push("rmdir sub".into());
                fs::remove_dir(m.p("sub")).expect("rmdir");
                model.sub = false;
            }
        }
    }
}

/// Every name in the mount matches the model, byte for byte.
fn verify(m: &common::Mounted, model: &Model, log: &[String]) {
    for (name, ino) in &model.names {
        let got = fs::read(m.p(name)).unwrap_or_else(|e| panic!("read {name}: {e}; ops: {log:?}"));
        assert!(
            got == model.data[ino],
            "{name} differs from the model ({} vs {} bytes); ops: {log:?}",
            got.len(),
            model.data[ino].len()
        );
    }
    let mut on_disk: Vec<String> = fs::read_dir(&m.mp)
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    if model.sub {
        on_disk.retain(|n| n != "sub");
        on_disk.extend(
            fs::read_dir(m.p("sub"))
                .expect("readdir sub")
                .map(|e| format!("sub/{}", e.expect("entry").file_name().into_string().expect("utf8"))),
        );
    }
    on_disk.sort();
    let want: Vec<String> = model.names.keys().cloned().collect();
    assert_eq!(on_disk, want, "names differ; ops: {log:?}");
}

#[test]
fn random_operations_match_a_model_across_remounts() {
    let seed: u64 = std::env::var("TARN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("TARN_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let env = common::Env::with_pool("256M");
    let mut model = Model::default();
    let mut log = Vec::new();
    for round in 0..3 {
        let m = env.mount("mnt", &["--threads", "4"]);
        verify(&m, &model, &log);
        for _ in 0..150 {
            step(&mut rng, &m, &mut model, &mut log);
        }
        verify(&m, &model, &log);
        println!(
            "round {round}: {} ops so far, {} names, {} bytes",
            log.len(),
            model.names.len(),
            model.data.values().map(Vec::len).sum::<usize>()
        );
        log.push(format!("remount after round {round}"));
        m.umount();
    }
}
