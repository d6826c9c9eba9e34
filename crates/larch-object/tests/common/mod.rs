//! What the tests against object_store's in-process store share: a runtime for their own
//! requests, and direct reads, writes and listings of the store behind a volume's back.

// Each test file uses its own share of these.
#![allow(dead_code)]

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

/// A runtime for a test's own requests to the store.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every key on `store`, sorted.
pub fn names(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    use futures_util::StreamExt;
    let store = Arc::clone(store);
    rt().block_on(async move {
        let mut out = Vec::new();
        let mut list = store.list(None);
        while let Some(meta) = list.next().await {
            out.push(meta.unwrap().location.to_string());
        }
        out.sort();
        out
    })
}

/// Reads `name` from `store` directly.
pub fn get(store: &Arc<dyn ObjectStore>, name: &str) -> Bytes {
    let (s, p) = (Arc::clone(store), Path::from(name));
    rt().block_on(async move { s.get(&p).await.unwrap().bytes().await.unwrap() })
}

/// Writes `bytes` as `name` on `store` directly.
pub fn put(store: &Arc<dyn ObjectStore>, name: &str, bytes: Vec<u8>) {
    let (s, p) = (Arc::clone(store), Path::from(name));
    rt().block_on(async move { s.put(&p, PutPayload::from(bytes)).await.unwrap() });
}

/// Deletes `name` from `store` directly.
pub fn delete(store: &Arc<dyn ObjectStore>, name: &str) {
    let (s, p) = (Arc::clone(store), Path::from(name));
    rt().block_on(async move { s.delete(&p).await.unwrap() });
}
