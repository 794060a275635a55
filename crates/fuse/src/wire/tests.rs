//! Tests of the wire layer: malformed requests, splitting a /dev/fuse request, a full
//! directory reply, the INIT capabilities.

use tarn_dataset::FileKind;

use super::*;

#[test]
fn a_short_or_garbled_request_is_einval_not_a_panic() {
    assert_eq!(InHeader::decode(&[0u8; 12]).err(), Some(Errno::EINVAL));
    // A READ whose struct is cut short.
    let a = Args(&[0u8; 10]);
    assert_eq!(a.u64(8).err(), Some(Errno::EINVAL));
    assert_eq!(a.u32(usize::MAX - 1).err(), Some(Errno::EINVAL));
    // A name without its NUL.
    assert_eq!(name(b"abc").err(), Some(Errno::EINVAL));
    assert_eq!(two_names(b"a\0b").err(), Some(Errno::EINVAL));
    assert_eq!(two_names(b"a\0b\0").ok(), Some((&b"a"[..], &b"b"[..])));
}

#[test]
fn dev_request_splits_at_the_opcode_struct() {
    let mut buf = vec![0u8; 4096];
    buf[0..4].copy_from_slice(&((IN_HEADER + 45) as u32).to_ne_bytes());
    buf[4..8].copy_from_slice(&WRITE.to_ne_bytes());
    let (h, tail, end) = split_dev_request(&buf, IN_HEADER + 45).expect("split");
    assert_eq!((h.opcode, tail, end), (WRITE, IN_HEADER + 40, IN_HEADER + 45));
    // A header claiming more than was read is cut to what was read.
    buf[0..4].copy_from_slice(&1000u32.to_ne_bytes());
    let (_, tail, end) = split_dev_request(&buf, IN_HEADER + 45).expect("split");
    assert_eq!((tail, end), (IN_HEADER + 40, IN_HEADER + 45));
    // A struct cut short leaves no tail; a request shorter than its header is refused.
    assert_eq!(split_dev_request(&buf, IN_HEADER + 10).expect("split").1, IN_HEADER + 10);
    assert!(split_dev_request(&buf, 20).is_err());
}

#[test]
fn dirents_stop_when_the_reply_is_full() {
    let mut room = [0u8; 40];
    let mut o = Out::new(&mut room);
    assert!(put_dirent(&mut o, 5, 1, FileKind::File, b"name"));
    assert_eq!(o.len, 32);
    assert!(!put_dirent(&mut o, 6, 2, FileKind::Dir, b"x"));
}

#[test]
fn init_asks_for_io_uring_only_when_told_and_offered() {
    let mut op = [0u8; 64];
    op[0..4].copy_from_slice(&7u32.to_ne_bytes());
    op[4..8].copy_from_slice(&44u32.to_ne_bytes());
    op[12..16].copy_from_slice(&((INIT_EXT | ASYNC_READ) as u32).to_ne_bytes());
    op[16..20].copy_from_slice(&((OVER_IO_URING >> 32) as u32).to_ne_bytes());
    let init = InitIn::decode(&op).expect("decode");
    let mut out = [0u8; 64];
    let (len, flags) = init_reply(&init, true, 1 << 20, &mut out).expect("reply");
    assert_eq!(len, 64);
    assert!(flags & OVER_IO_URING != 0);
    let (_, flags) = init_reply(&init, false, 1 << 20, &mut out).expect("reply");
    assert!(flags & OVER_IO_URING == 0);
    assert!(init_reply(&init, true, 1 << 20, &mut [0u8; 10]).is_err());
}
