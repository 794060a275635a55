//! Tests of the stream: records round-trip, and every defect of a stream is refused
//! by name.

use super::*;
use tarn_objects::ObjType;

fn sample() -> Vec<Record> {
    vec![
        Record::Begin(Begin {
            flags: 0,
            to_guid: 7,
            to_txg: 9,
            creation: 1,
            from_guid: 0,
            from_txg: 0,
            pool_guid: 3,
            dataset_id: 2,
            next_obj: 4,
            resume_object: 0,
            resume_offset: 0,
            dataset: "tank/a".into(),
            snapshot: "s".into(),
            unlinked: vec![3],
        }),
        Record::Object { id: 2, dnode: Box::new(Dnode::new(ObjType::File, 4096, 0o100644, 5)) },
        Record::Write {
            object: 2,
            offset: 0,
            birth: 8,
            compression: Compression::Lz4,
            lsize: 4096,
            data: vec![1, 2, 3],
        },
        Record::Free { object: 2, offset: 4096, length: 8192 },
        Record::FreeObjects { first: 3, count: 2 },
    ]
}

fn encode(recs: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = StreamWriter::new(&mut out).unwrap();
    for r in recs {
        w.put(r).unwrap();
    }
    w.end(7).unwrap();
    out
}

fn read_all(bytes: &[u8]) -> Result<Vec<Record>, StreamError> {
    let mut input = bytes;
    let mut r = StreamReader::open(&mut input)?.expect("a stream");
    let mut out = Vec::new();
    loop {
        let rec = r.next()?;
        let end = matches!(rec, Record::End { .. });
        out.push(rec);
        if end {
            return Ok(out);
        }
    }
}

#[test]
fn records_round_trip() {
    let recs = sample();
    let got = read_all(&encode(&recs)).unwrap();
    assert_eq!(&got[..recs.len()], &recs[..]);
    assert!(matches!(got.last(), Some(Record::End { to_guid: 7, .. })));
}

#[test]
fn every_defect_is_named() {
    let good = encode(&sample());
    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(matches!(read_all(&bad), Err(StreamError::BadMagic)));
    let mut newer = good.clone();
    newer[8] = 2;
    assert!(matches!(read_all(&newer), Err(StreamError::NewerVersion { found: 2, supported: 1 })));
    for cut in [PREAMBLE_LEN + 3, good.len() - 5, good.len() / 2] {
        let err = read_all(&good[..cut]).unwrap_err();
        assert!(matches!(err, StreamError::Truncated { .. } | StreamError::NoEnd { .. }), "cut {cut}: {err}");
    }
    for at in (PREAMBLE_LEN..good.len()).step_by(7) {
        let mut flipped = good.clone();
        flipped[at] ^= 0x10;
        let err = read_all(&flipped).unwrap_err();
        assert!(
            matches!(err, StreamError::Checksum { .. } | StreamError::TooLarge { .. } | StreamError::Truncated { .. }),
            "flip at {at}: {err}"
        );
    }
}

#[test]
fn records_out_of_order_are_refused() {
    // Two streams' records spliced: the sequence numbers say so.
    let a = encode(&sample());
    let mut spliced = a[..PREAMBLE_LEN].to_vec();
    let mut w_out = Vec::new();
    StreamWriter::new(&mut w_out).unwrap().put(&sample()[1]).unwrap();
    let mut w2_out = Vec::new();
    {
        let mut w2 = StreamWriter::new(&mut w2_out).unwrap();
        w2.put(&sample()[0]).unwrap();
        w2.put(&sample()[1]).unwrap();
    }
    // Record 1 of the second stream placed first: seq 1 where 0 is due.
    let first_len = w2_out.len() - w_out.len();
    spliced.extend_from_slice(&w2_out[first_len + PREAMBLE_LEN..]);
    let err = read_all(&spliced).unwrap_err();
    assert!(matches!(err, StreamError::OutOfOrder { seq: 0, .. }), "{err}");
}
