//! The [`Embedder`] port: text in, unit vectors out, for the knowledge base's
//! vector leg (see the crate's README, "Semantic retrieval").
//!
//! An embedder maps a batch of texts to vectors of one model's space. Queries
//! and passages are embedded with their [`EmbedRole`]: asymmetric models
//! (e5: `query: ` and `passage: ` prefixes) need to know which side a text is
//! on. The knowledge base L2-normalizes what it receives, keys stored vectors
//! by [`Embedder::model_id`] (vectors of two models never mix) and treats any
//! error as "the vector leg did not run": BM25 answers alone, and the
//! harness control view says so.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

/// Which side of a retrieval a text is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmbedRole {
    /// A question (e5: `query: `).
    Query,
    /// A chunk of a document (e5: `passage: `).
    Passage,
}

/// Why an embedder gave no vectors. Messages are for the operator's log
/// (they name the configured endpoint or library, never a key); nothing of
/// them reaches the agent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The embedder cannot be used at all (library or model missing, bad
    /// configuration, key variable unset).
    #[error("embedder unavailable: {message}")]
    Unavailable {
        /// What is missing.
        message: String,
    },
    /// It did not answer in time.
    #[error("embedder timed out after {millis} ms")]
    Timeout {
        /// The bound that passed.
        millis: u64,
    },
    /// It answered with an error (after its retries).
    #[error("embedder failed: {message}")]
    Failed {
        /// What went wrong.
        message: String,
    },
    /// It answered something that is not one vector per text of one
    /// dimension with finite components.
    #[error("embedder answered malformed vectors: {message}")]
    Malformed {
        /// What was wrong.
        message: String,
    },
}

impl EmbedError {
    /// The stable code of the error, for counters and logs:
    /// `EMBEDDER_UNAVAILABLE`, `EMBEDDER_TIMEOUT`, `EMBEDDER_FAILED`,
    /// `EMBEDDER_MALFORMED`.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::Unavailable { .. } => "EMBEDDER_UNAVAILABLE",
            Self::Timeout { .. } => "EMBEDDER_TIMEOUT",
            Self::Failed { .. } => "EMBEDDER_FAILED",
            Self::Malformed { .. } => "EMBEDDER_MALFORMED",
        }
    }
}

/// The port to a text embedding model.
///
/// # Behavior
/// - [`embed`](Self::embed) returns exactly one vector per text, in order,
///   all of one dimension, finite. The caller normalizes them.
/// - It may be called concurrently; batches are at most
///   [`max_batch`](Self::max_batch) texts.
/// - An error means no vector for any text of the batch; the caller degrades
///   to BM25, never to an error result.
#[async_trait]
pub trait Embedder: Send + Sync + fmt::Debug + 'static {
    /// The identity of the vector space: model and anything that changes its
    /// vectors (quantization, prefixes). Stored vectors are keyed by it.
    fn model_id(&self) -> &str;

    /// Most texts per [`embed`](Self::embed) call.
    fn max_batch(&self) -> usize {
        32
    }

    /// Embeds `texts`, all in `role`.
    ///
    /// # Errors
    /// [`EmbedError`]; see the trait docs.
    async fn embed(&self, texts: &[String], role: EmbedRole) -> Result<Vec<Vec<f32>>, EmbedError>;
}

#[async_trait]
impl<E: Embedder + ?Sized> Embedder for Arc<E> {
    fn model_id(&self) -> &str {
        (**self).model_id()
    }

    fn max_batch(&self) -> usize {
        (**self).max_batch()
    }

    async fn embed(&self, texts: &[String], role: EmbedRole) -> Result<Vec<Vec<f32>>, EmbedError> {
        (**self).embed(texts, role).await
    }
}

#[cfg(feature = "http-embeddings")]
mod http;
#[cfg(feature = "local-embeddings")]
mod local;

#[cfg(feature = "http-embeddings")]
pub use http::{HttpEmbedder, HttpEmbedderConfig};
#[cfg(feature = "local-embeddings")]
pub use local::LocalEmbedder;
