//! Issue 26: an interrupt aborts every multipart upload in flight. An upload is started
//! through a [`Writer`] on object_store's in-memory store, behind a multipart store that
//! counts the uploads left open and holds every part after the first in flight forever (a
//! slow link); `abort_uploads_in_flight` must then abort it within its time, leave no upload
//! open, and make the writer fail with `RemoteProblem::Aborted`.
//!
//! One test in this binary: `abort_uploads_in_flight` aborts every upload of the process.
// Object storage: built with the `s3` feature (on by default) only.
#![cfg(feature = "s3")]

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use object_store::memory::InMemory;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{MultipartId, ObjectStoreExt, PutPayload, PutResult};
use paramdex::remote::{
    abort_uploads_in_flight, AbortOutcome, ObjectLocation, ObjectUpload, UploadOptions,
    MIN_PART_SIZE,
};
use paramdex::{DType, Error, RemoteProblem, Tensor, Writer, WriterOptions};

/// An in-memory multipart store that knows which uploads are open and never finishes
/// uploading a part numbered `hold_from` or more.
#[derive(Debug)]
struct Held {
    inner: InMemory,
    open: Mutex<HashSet<String>>,
    hold_from: usize,
    held: AtomicUsize,
    aborts: AtomicUsize,
}

#[async_trait::async_trait]
impl MultipartStore for Held {
    async fn create_multipart(&self, path: &ObjectPath) -> object_store::Result<MultipartId> {
        let id = self.inner.create_multipart(path).await?;
        self.open.lock().unwrap().insert(id.clone());
        Ok(id)
    }

    async fn put_part(
        &self,
        path: &ObjectPath,
        id: &MultipartId,
        part_idx: usize,
        data: PutPayload,
    ) -> object_store::Result<PartId> {
        if part_idx >= self.hold_from {
            self.held.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        self.inner.put_part(path, id, part_idx, data).await
    }

    async fn complete_multipart(
        &self,
        path: &ObjectPath,
        id: &MultipartId,
        parts: Vec<PartId>,
    ) -> object_store::Result<PutResult> {
        let r = self.inner.complete_multipart(path, id, parts).await?;
        self.open.lock().unwrap().remove(id);
        Ok(r)
    }

    async fn abort_multipart(
        &self,
        path: &ObjectPath,
        id: &MultipartId,
    ) -> object_store::Result<()> {
        self.aborts.fetch_add(1, Ordering::SeqCst);
        self.inner.abort_multipart(path, id).await?;
        self.open.lock().unwrap().remove(id);
        Ok(())
    }
}

/// The [`Error::Remote`] problem inside `e`, however wrapped (a writer reports a failed write
/// as an I/O error carrying the upload's error).
fn remote_problem(e: &Error) -> Option<RemoteProblem> {
    match e {
        Error::Remote { problem, .. } => Some(*problem),
        Error::Io { source, .. } => source
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<Error>())
            .and_then(remote_problem),
        _ => None,
    }
}

#[test]
fn an_interrupt_aborts_the_uploads_in_flight() {
    let store = Arc::new(Held {
        inner: InMemory::new(),
        open: Mutex::new(HashSet::new()),
        hold_from: 1,
        held: AtomicUsize::new(0),
        aborts: AtomicUsize::new(0),
    });
    let runtime = Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    );
    let url = "memory:///big.pdx";
    let loc = ObjectLocation {
        store: Arc::new(InMemory::new()),
        multipart: Some(store.clone()),
        path: ObjectPath::from("big.pdx"),
        url: url.to_string(),
        runtime: runtime.clone(),
    };
    let opts = UploadOptions {
        part_size: MIN_PART_SIZE,
        concurrency: 2,
    };
    let up = ObjectUpload::new(loc, &opts).unwrap();
    let counters = up.counters();
    let writer = std::thread::spawn(move || -> paramdex::Result<()> {
        let mut w = Writer::create_on(Box::new(up), WriterOptions::default())?;
        let data = vec![7u8; MIN_PART_SIZE];
        for i in 0..8 {
            w.add(
                format!("t{i}"),
                Tensor::new(DType::UInt8, &[data.len() as u64], &data),
            )?;
        }
        w.finish().map(|_| ())
    });

    // Wait until the upload is open with parts held in flight.
    let start = Instant::now();
    while store.held.load(Ordering::SeqCst) < 2 || store.open.lock().unwrap().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the upload never got under way: {:?}",
            counters.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let report = abort_uploads_in_flight(Duration::from_secs(20));
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(report[0].url, url);
    assert!(
        matches!(report[0].outcome, AbortOutcome::Aborted),
        "{report:?}"
    );
    // The store's count of open uploads is back to 0, by one abort.
    assert!(store.open.lock().unwrap().is_empty());
    assert_eq!(store.aborts.load(Ordering::SeqCst), 1);
    assert_eq!(counters.stats().aborted, 1);

    // The writer fails, saying the upload was aborted; nothing appears.
    let e = writer.join().unwrap().unwrap_err();
    assert_eq!(remote_problem(&e), Some(RemoteProblem::Aborted), "{e:?}");
    assert!(e.to_string().contains(url), "{e}");
    let got = runtime.block_on(store.inner.get(&ObjectPath::from("big.pdx")));
    assert!(
        matches!(got, Err(object_store::Error::NotFound { .. })),
        "{got:?}"
    );
    assert_eq!(store.aborts.load(Ordering::SeqCst), 1, "aborted once");

    // Nothing is in flight any more.
    assert!(abort_uploads_in_flight(Duration::from_secs(1)).is_empty());
}
