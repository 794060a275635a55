use std::path::PathBuf;
use tarn_dataset::{NewObject, ROOT_ID};
use tarn_pool::{CreateOptions, ImportOptions, Pool, VdevSpec};

#[test]
fn write_export_import_read() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d0.img");
    let opts = CreateOptions { size: Some(256 << 20), ..Default::default() };
    let pool = Pool::create("tank", &[VdevSpec::Disk(img.clone())], &opts).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let f = ds.create(ROOT_ID, b"hello", NewObject::File, 0o644, 0, 0).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    ds.write(f.ino, 0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(ds.read(f.ino, 0, &mut back).unwrap(), data.len());
    assert_eq!(back, data);
    pool.sync().unwrap();
    let mut back = vec![0u8; data.len()];
    ds.read(f.ino, 0, &mut back).unwrap();
    assert_eq!(back, data);
    drop(ds);
    pool.export().unwrap();
    let pool = Pool::import_paths(&[PathBuf::from(&img)], &ImportOptions::default()).unwrap();
    let ds = pool.dataset("tank").unwrap();
    let a = ds.lookup(ROOT_ID, b"hello").unwrap();
    assert_eq!(a.size, data.len() as u64);
    let mut back = vec![0u8; data.len()];
    ds.read(a.ino, 0, &mut back).unwrap();
    assert_eq!(back, data);
    println!("{:?}", pool.get_properties("tank", None).unwrap());
    pool.export().unwrap();
}
