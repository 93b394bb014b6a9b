use super::*;

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    futures::executor::block_on(f)
}

#[test]
fn a_file_store_keeps_what_it_is_given_and_reads_ranges_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = RemoteStore::start(&StoreConfig::file(dir.path().join("store"))).unwrap();
    let src = dir.path().join("segment");
    // Larger than one part, and not a multiple of it: a multipart upload with a short last part.
    let data: Vec<u8> = (0..(PART_BYTES * 2 + 12_345))
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    let len = data.len() as u64 - 5; // the file may hold more than is uploaded
    let up = block_on(store.put_file("t/0/a.log".into(), src.clone(), len)).unwrap();
    assert_eq!(up.size, len);
    assert_eq!(up.crc32c, crc32c::crc32c(&data[..len as usize]));
    let got = block_on(store.get("t/0/a.log".into())).unwrap();
    assert_eq!(&got[..], &data[..len as usize]);
    let mid = block_on(store.get_range("t/0/a.log".into(), 1000..PART_BYTES as u64 + 7)).unwrap();
    assert_eq!(&mid[..], &data[1000..PART_BYTES + 7]);

    let small = block_on(store.put("t/0/a.index".into(), Bytes::from_static(b"index"))).unwrap();
    assert_eq!(small.size, 5);
    let mut listed = block_on(store.list("t/0".into())).unwrap();
    listed.sort();
    assert_eq!(
        listed,
        vec![
            ("t/0/a.index".to_string(), 5),
            ("t/0/a.log".to_string(), len)
        ]
    );

    block_on(store.delete("t/0/a.log".into())).unwrap();
    block_on(store.delete("t/0/a.log".into())).unwrap(); // already gone: fine
    assert_eq!(
        block_on(store.get("t/0/a.log".into())),
        Err(RemoteError::NotFound {
            key: "t/0/a.log".into()
        })
    );
}

#[test]
fn a_file_shorter_than_its_length_is_not_uploaded() {
    let dir = tempfile::tempdir().unwrap();
    let store = RemoteStore::start(&StoreConfig::file(dir.path().join("store"))).unwrap();
    let src = dir.path().join("short");
    std::fs::write(&src, b"abc").unwrap();
    let err = block_on(store.put_file("x".into(), src, 10)).unwrap_err();
    assert!(matches!(err, RemoteError::LocalFile { .. }), "{err}");
    assert!(matches!(
        block_on(store.get("x".into())),
        Err(RemoteError::NotFound { .. })
    ));
}

#[test]
fn urls_name_their_store_or_say_what_is_wrong() {
    let mut c = StoreConfig::file("/tmp/x");
    assert_eq!(c.kind(), Ok(StoreKind::File("/tmp/x".into())));
    c.url = "s3://bucket/some/prefix/".into();
    assert_eq!(
        c.kind(),
        Ok(StoreKind::S3 {
            bucket: "bucket".into(),
            prefix: "some/prefix".into()
        })
    );
    for bad in ["s3://", "file://relative", "gs://b", "/plain/path"] {
        c.url = bad.into();
        assert!(c.kind().is_err(), "{bad}");
    }
    c.secret_access_key = Some(Secret::new("very-secret"));
    assert!(!format!("{c:?}").contains("very-secret"));
    assert!(!c.describe().contains("very-secret"));
}
