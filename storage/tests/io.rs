//! The file-system helpers of the io seam: each runs on the executor's blocking thread, leaves
//! the same result on disk as the plain call would, and keeps the shard running meanwhile.

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use common::on_executor;
use tributary_storage::io;

#[test]
fn blocking_work_runs_off_the_shard_thread_while_the_shard_goes_on() {
    on_executor(|_| async move {
        let shard_thread = std::thread::current().id();
        // A task on the shard that counts its turns while the blocking call sleeps.
        let turns = Rc::new(Cell::new(0u32));
        let stop = Rc::new(Cell::new(false));
        let ticker = {
            let (turns, stop) = (turns.clone(), stop.clone());
            glommio::spawn_local(async move {
                for _ in 0..1_000 {
                    if stop.get() {
                        break;
                    }
                    turns.set(turns.get() + 1);
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
            })
        };
        let ran_on = io::blocking(|| {
            std::thread::sleep(Duration::from_millis(100));
            Ok(std::thread::current().id())
        })
        .await
        .unwrap();
        stop.set(true);
        ticker.await;
        assert_ne!(ran_on, shard_thread, "ran on the blocking thread");
        assert!(
            turns.get() >= 10,
            "the shard ran only {} turns during a 100 ms blocking call",
            turns.get()
        );
    });
}

#[test]
fn helpers_leave_the_same_result_on_disk() {
    on_executor(|root| async move {
        // create_dir_all (partition open runs it on the blocking thread): the whole chain, and
        // again is no error.
        let dir = root.join("a").join("b");
        let create = |d: std::path::PathBuf| io::blocking(move || io::now::create_dir_all(&d));
        create(dir.clone()).await.unwrap();
        assert!(dir.is_dir());
        create(dir.clone()).await.unwrap();

        // write_file_atomic, durable or not: the content in place, no temporary file left.
        io::write_file_atomic(&dir, "f", b"first".to_vec(), true)
            .await
            .unwrap();
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"first");
        io::write_file_atomic(&dir, "f", b"second, longer".to_vec(), false)
            .await
            .unwrap();
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"second, longer");
        assert!(!dir.join("f.tmp").exists());
        io::sync_dir(&dir).await.unwrap();

        // read_file: the bytes, and None (not an error) for a missing file.
        assert_eq!(
            io::read_file(&dir.join("f")).await.unwrap().as_deref(),
            Some(&b"second, longer"[..])
        );
        assert_eq!(io::read_file(&dir.join("missing")).await.unwrap(), None);

        // rename and read_dir_names.
        io::rename(&dir.join("f"), &dir.join("g")).await.unwrap();
        std::fs::write(dir.join("h"), b"").unwrap();
        let mut names = {
            let d = dir.clone();
            io::blocking(move || io::now::read_dir_names(&d)).await
        }
        .unwrap();
        names.sort();
        assert_eq!(names, ["g", "h"]);

        // remove_file: a missing file is NotFound; remove_file_if_exists says whether it was.
        io::remove_file(&dir.join("g")).await.unwrap();
        assert!(!dir.join("g").exists());
        let e = io::remove_file(&dir.join("g")).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(io::remove_file_if_exists(&dir.join("h")).await.unwrap());
        assert!(!io::remove_file_if_exists(&dir.join("h")).await.unwrap());

        // remove_dir_all: the tree goes.
        std::fs::write(dir.join("x"), b"x").unwrap();
        io::remove_dir_all(&root.join("a")).await.unwrap();
        assert!(!root.join("a").exists());
        assert!({
            let d = root.join("a");
            io::blocking(move || io::now::read_dir_names(&d)).await
        }
        .is_err());
    });
}

#[test]
#[cfg(debug_assertions)]
fn a_blocking_call_on_a_shard_thread_is_caught_in_debug_builds() {
    on_executor(|root| async move {
        let caught = std::panic::catch_unwind(|| io::now::read_file(&root.join("x")));
        assert!(caught.is_err(), "io::now on a shard thread must panic");
        // Through the blocking thread it is fine.
        let r = root.clone();
        let read = io::blocking(move || io::now::read_file(&r.join("x"))).await;
        assert_eq!(read.unwrap(), None);
    });
}

/// A write-through segment file is open with O_DSYNC (not O_SYNC) beside O_DIRECT, as the
/// kernel reports its status flags; a plain one has O_DIRECT only.
#[test]
fn a_write_through_segment_is_open_o_dsync_and_o_direct() {
    on_executor(|path| async move {
        let flags = |fd: i32| -> u32 {
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
            let line = info.lines().find(|l| l.starts_with("flags:")).unwrap();
            u32::from_str_radix(line["flags:".len()..].trim(), 8).unwrap()
        };
        // O_SYNC is O_DSYNC and one more bit: a write-through file has O_DSYNC, not O_SYNC.
        let (dsync, sync) = (libc::O_DSYNC as u32, libc::O_SYNC as u32);
        let direct = libc::O_DIRECT as u32;
        let through = io::SegmentFile::open_with(
            &path.join("through.log"),
            true,
            io::WriteDurability::EachWrite,
        )
        .await
        .unwrap();
        assert!(through.writes_are_durable());
        let f = flags(through.descriptor());
        assert_eq!((f & sync, f & direct), (dsync, direct), "flags {f:o}");
        let plain = io::SegmentFile::open(&path.join("plain.log"), true)
            .await
            .unwrap();
        assert!(!plain.writes_are_durable());
        let f = flags(plain.descriptor());
        assert_eq!((f & sync, f & direct), (0, direct), "flags {f:o}");
    });
}
