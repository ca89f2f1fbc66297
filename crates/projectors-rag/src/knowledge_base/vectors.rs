//! The vector leg: one embedding per chunk, kept by chunk hash, and the
//! brute-force cosine search over them.
//!
//! A chunk's passage is its title, heading path and text (what a reader of
//! the excerpt sees, with its context). Its key is the SHA-256 of that
//! passage, so an unchanged chunk keeps its vector whatever happens to the
//! tantivy index around it (a rebuild, a file renamed), and a changed file
//! re-embeds only the chunks whose text changed. With a persistent index the
//! vectors live beside it, one file per embedder model
//! (`kb-<hash>.vectors/<model-hash>.bin`), written whole to a temporary file
//! and renamed over the old one: a process killed mid-write leaves the
//! previous file, and the next sync embeds the difference again.
//!
//! The table a search uses belongs to one tantivy searcher generation (its
//! rows are document addresses): after the index changes, the vector leg is
//! not ready ([`VECTORS_NOT_READY`]) until the new chunks are embedded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tantivy::{DocAddress, Searcher, SearcherGeneration};

use super::files::hex;
use super::index::Fields;
use crate::embeddings::{EmbedError, EmbedRole, Embedder};

/// The fallback code when the index changed and its new chunks are not
/// embedded yet.
pub const VECTORS_NOT_READY: &str = "VECTORS_NOT_READY";
const FILE_MAGIC: &[u8; 8] = b"ACIVEC1\n";

pub(crate) type ChunkKey = [u8; 32];

/// How the vector leg runs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct VectorOptions {
    /// How long a query's embedding may take before the search answers
    /// with BM25 alone.
    pub query_timeout: Duration,
    /// The smallest cosine similarity at which a chunk that only the vector
    /// leg found counts as evidence, for every query; `None` uses the
    /// calibrated value of the query's script ([`evidence_similarity`]).
    pub min_similarity: Option<f32>,
    /// Where vectors persist for a base without a persistent index (the
    /// bundled runbooks, `persistent = false`): `<dir>/<model-hash>.bin`.
    /// `None` keeps them in RAM. A base with a persistent index keeps them
    /// beside it and ignores this.
    pub vectors_dir: Option<PathBuf>,
}

impl Default for VectorOptions {
    fn default() -> Self {
        Self {
            query_timeout: Duration::from_secs(2),
            min_similarity: None,
            vectors_dir: None,
        }
    }
}

impl VectorOptions {
    /// The evidence similarity for `query`: the configured one, else the
    /// calibrated one of its script.
    #[must_use]
    pub fn min_similarity_for(&self, query: &str) -> f32 {
        self.min_similarity
            .unwrap_or_else(|| evidence_similarity(query))
    }
}

/// The calibrated evidence similarity of the local model
/// (multilingual-e5-small) for a query, by its script: Hangul (Korean),
/// kana (Japanese), Han without kana (Chinese), else Latin and the rest.
///
/// The model's similarities sit on a baseline that depends on the query's
/// language (Chinese queries score higher against everything), so one
/// threshold cannot serve all. Each value is just above the highest
/// similarity any unrelated question of that language reached against the
/// bundled runbooks (`tests/data/unrelated_queries.json`, printed by
/// `cargo xtask bench knowledge`), plus a margin: a chunk found by the
/// vector leg alone is evidence only when it is nearer than anything an
/// unrelated question reaches.
#[must_use]
pub fn evidence_similarity(query: &str) -> f32 {
    let (mut hangul, mut kana, mut han) = (false, false, false);
    for c in query.chars() {
        match u32::from(c) {
            0xAC00..=0xD7AF | 0x1100..=0x11FF | 0x3130..=0x318F => hangul = true,
            0x3040..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9F => kana = true,
            0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0xF900..=0xFAFF => han = true,
            _ => {}
        }
    }
    if hangul {
        EVIDENCE_SIMILARITY_KOREAN
    } else if kana {
        EVIDENCE_SIMILARITY_JAPANESE
    } else if han {
        EVIDENCE_SIMILARITY_CHINESE
    } else {
        EVIDENCE_SIMILARITY_LATIN
    }
}

/// Evidence similarity of Korean queries.
pub const EVIDENCE_SIMILARITY_KOREAN: f32 = 0.845;
/// Evidence similarity of Japanese queries.
pub const EVIDENCE_SIMILARITY_JAPANESE: f32 = 0.848;
/// Evidence similarity of Chinese queries.
pub const EVIDENCE_SIMILARITY_CHINESE: f32 = 0.885;
/// Evidence similarity of Latin-script (and other) queries.
pub const EVIDENCE_SIMILARITY_LATIN: f32 = 0.874;

/// What an embedding pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct EmbedReport {
    /// Chunks in the index.
    pub chunks: usize,
    /// Chunks whose vector was already known (this process or the file).
    pub reused: usize,
    /// Chunks embedded by this pass.
    pub embedded: usize,
}

/// One chunk of the searcher, with its passage and key.
struct Passage {
    address: DocAddress,
    key: ChunkKey,
    text: String,
}

/// The vectors of one searcher generation.
pub(crate) struct VectorTable {
    generation: SearcherGeneration,
    dims: usize,
    addresses: Vec<DocAddress>,
    data: Vec<f32>,
}

impl VectorTable {
    pub(crate) fn serves(&self, searcher: &Searcher) -> bool {
        &self.generation == searcher.generation()
    }

    /// The `limit` rows most similar to `query` (a unit vector): (cosine,
    /// address), best first, ties by address; and the mean and standard
    /// deviation of the similarity of every row, the baseline a hit must
    /// stand out from.
    pub(crate) fn nearest(&self, query: &[f32], limit: usize) -> Nearest {
        if query.len() != self.dims || self.dims == 0 || self.addresses.is_empty() {
            return Nearest::default();
        }
        let mut scored: Vec<(f32, DocAddress)> = self
            .data
            .chunks_exact(self.dims)
            .zip(&self.addresses)
            .map(|(row, address)| (dot(row, query), *address))
            .collect();
        #[allow(clippy::cast_precision_loss)] // chunk counts are far below 2^24
        let count = scored.len() as f64;
        let mean = scored.iter().map(|(s, _)| f64::from(*s)).sum::<f64>() / count;
        let variance = scored
            .iter()
            .map(|(s, _)| (f64::from(*s) - mean).powi(2))
            .sum::<f64>()
            / count;
        let by_score = |a: &(f32, DocAddress), b: &(f32, DocAddress)| {
            b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1))
        };
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit, by_score);
            scored.truncate(limit);
        }
        scored.sort_by(by_score);
        Nearest {
            hits: scored,
            mean,
            deviation: variance.sqrt(),
        }
    }
}

/// The nearest rows of a query and the spread of all rows' similarity.
#[derive(Debug, Clone, Default)]
pub(crate) struct Nearest {
    pub(crate) hits: Vec<(f32, DocAddress)>,
    pub(crate) mean: f64,
    pub(crate) deviation: f64,
}

impl Nearest {
    /// How many standard deviations `similarity` stands above the mean.
    pub(crate) fn standing(&self, similarity: f32) -> f64 {
        if self.deviation > 0.0 {
            (f64::from(similarity) - self.mean) / self.deviation
        } else {
            0.0
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Four accumulators: the compiler vectorizes this without fast-math.
    let mut sums = [0.0_f32; 4];
    let (a4, a_rest) = a.split_at(a.len() - a.len() % 4);
    let (b4, b_rest) = b.split_at(a4.len());
    for (x, y) in a4.chunks_exact(4).zip(b4.chunks_exact(4)) {
        for lane in 0..4 {
            sums[lane] += x[lane] * y[lane];
        }
    }
    let rest: f32 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
    sums.iter().sum::<f32>() + rest
}

/// Scales `vector` to unit length; `None` when it is empty, not finite or
/// zero.
pub(crate) fn normalized(mut vector: Vec<f32>) -> Option<Vec<f32>> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if vector.is_empty() || !norm.is_finite() || norm == 0.0 {
        return None;
    }
    for x in &mut vector {
        *x /= norm;
    }
    Some(vector)
}

/// The vector leg of one knowledge base.
pub(crate) struct VectorLeg {
    pub(crate) embedder: Arc<dyn Embedder>,
    pub(crate) options: VectorOptions,
    /// Where vectors persist (`None`: in RAM only).
    file: Option<PathBuf>,
    known: Mutex<Known>,
    table: RwLock<Option<Arc<VectorTable>>>,
    /// Serializes embedding passes (a watcher's and a caller's).
    pass: tokio::sync::Mutex<()>,
    fallbacks: Mutex<BTreeMap<&'static str, u64>>,
    /// The code of the last embedding pass's failure, until one succeeds.
    sync_error: Mutex<Option<&'static str>>,
}

#[derive(Default)]
struct Known {
    dims: usize,
    vectors: HashMap<ChunkKey, Arc<[f32]>>,
    loaded: bool,
}

impl fmt::Debug for VectorLeg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VectorLeg")
            .field("embedder", &self.embedder)
            .field("options", &self.options)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl VectorLeg {
    pub(crate) fn new(
        embedder: Arc<dyn Embedder>,
        options: VectorOptions,
        index_path: Option<&Path>,
    ) -> Self {
        let name = format!(
            "{}.bin",
            &hex(&Sha256::digest(embedder.model_id().as_bytes()))[..16]
        );
        let file = match (index_path, &options.vectors_dir) {
            (Some(path), _) => {
                let mut dir = path.as_os_str().to_owned();
                dir.push(".vectors");
                Some(PathBuf::from(dir).join(name))
            }
            (None, Some(dir)) => Some(dir.join(name)),
            (None, None) => None,
        };
        Self {
            embedder,
            options,
            file,
            known: Mutex::new(Known::default()),
            table: RwLock::new(None),
            pass: tokio::sync::Mutex::new(()),
            fallbacks: Mutex::new(BTreeMap::new()),
            sync_error: Mutex::new(None),
        }
    }

    pub(crate) fn table(&self) -> Option<Arc<VectorTable>> {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Why the leg has no table for the current index: the last embedding
    /// pass's failure, else [`VECTORS_NOT_READY`].
    pub(crate) fn not_ready(&self) -> &'static str {
        self.sync_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or(VECTORS_NOT_READY)
    }

    pub(crate) fn note_sync(&self, error: Option<&'static str>) {
        *self
            .sync_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = error;
    }

    pub(crate) fn note_fallback(&self, code: &'static str) {
        *self
            .fallbacks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(code)
            .or_default() += 1;
    }

    pub(crate) fn fallbacks(&self) -> BTreeMap<&'static str, u64> {
        self.fallbacks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Embeds the query, within the query timeout.
    pub(crate) async fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        let timeout = self.options.query_timeout;
        let texts = [query.to_owned()];
        let embedded = tokio::time::timeout(timeout, self.embedder.embed(&texts, EmbedRole::Query))
            .await
            .map_err(|_| EmbedError::Timeout {
                millis: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            })??;
        let [vector] =
            <[Vec<f32>; 1]>::try_from(embedded).map_err(|vectors| EmbedError::Malformed {
                message: format!("{} vectors for one query", vectors.len()),
            })?;
        normalized(vector).ok_or_else(|| EmbedError::Malformed {
            message: "the query's vector is empty, zero or not finite".to_owned(),
        })
    }

    /// Brings the table up to date with `searcher`: embeds the chunks whose
    /// vectors are not known, persists them, swaps the table.
    pub(crate) async fn sync(
        &self,
        searcher: Searcher,
        fields: Fields,
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<EmbedReport, EmbedError> {
        let _pass = self.pass.lock().await;
        if self.table().is_some_and(|table| table.serves(&searcher)) {
            let chunks = self.table().map_or(0, |table| table.addresses.len());
            return Ok(EmbedReport {
                chunks,
                reused: chunks,
                embedded: 0,
            });
        }
        let file = self.file.clone();
        let (passages, loaded) = {
            let searcher = searcher.clone();
            let load = !self
                .known
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .loaded;
            tokio::task::spawn_blocking(move || {
                let passages = passages(&searcher, &fields);
                let loaded = match (&file, load) {
                    (Some(file), true) => read_file(file).ok(),
                    _ => None,
                };
                (passages, loaded)
            })
            .await
            .map_err(|error| EmbedError::Failed {
                message: format!("reading the chunks failed: {error}"),
            })?
        };
        let model_id = self.embedder.model_id().to_owned();
        let missing: Vec<usize> = {
            let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
            if !known.loaded {
                known.loaded = true;
                if let Some((file_model, dims, vectors)) = loaded
                    && file_model == model_id
                    && (known.dims == 0 || known.dims == dims)
                {
                    known.dims = dims;
                    known.vectors.extend(vectors);
                }
            }
            let mut seen = HashSet::new();
            passages
                .iter()
                .enumerate()
                .filter(|(_, p)| !known.vectors.contains_key(&p.key) && seen.insert(p.key))
                .map(|(at, _)| at)
                .collect()
        };
        let total = missing.len();
        progress(0, total);
        let batch = self.embedder.max_batch().max(1);
        let mut done = 0;
        for group in missing.chunks(batch) {
            let texts: Vec<String> = group.iter().map(|&at| passages[at].text.clone()).collect();
            let vectors = self.embedder.embed(&texts, EmbedRole::Passage).await?;
            if vectors.len() != texts.len() {
                return Err(EmbedError::Malformed {
                    message: format!("{} vectors for {} passages", vectors.len(), texts.len()),
                });
            }
            let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
            for (&at, vector) in group.iter().zip(vectors) {
                let vector = normalized(vector).ok_or_else(|| EmbedError::Malformed {
                    message: "a passage's vector is empty, zero or not finite".to_owned(),
                })?;
                if known.dims == 0 {
                    known.dims = vector.len();
                } else if known.dims != vector.len() {
                    return Err(EmbedError::Malformed {
                        message: format!(
                            "vectors of {} and {} dimensions",
                            known.dims,
                            vector.len()
                        ),
                    });
                }
                known.vectors.insert(passages[at].key, Arc::from(vector));
            }
            drop(known);
            done += group.len();
            progress(done, total);
        }
        // The table of this generation; the file keeps the current chunks'
        // vectors only (a removed chunk's vector goes with it).
        let (table, snapshot) = {
            let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
            let current: HashSet<ChunkKey> = passages.iter().map(|p| p.key).collect();
            let before = known.vectors.len();
            known.vectors.retain(|key, _| current.contains(key));
            let pruned = known.vectors.len() != before;
            let dims = known.dims;
            let mut addresses = Vec::with_capacity(passages.len());
            let mut data = Vec::with_capacity(passages.len() * dims);
            for passage in &passages {
                if let Some(vector) = known.vectors.get(&passage.key) {
                    addresses.push(passage.address);
                    data.extend_from_slice(vector);
                }
            }
            let table = VectorTable {
                generation: searcher.generation().clone(),
                dims,
                addresses,
                data,
            };
            let snapshot: Vec<(ChunkKey, Arc<[f32]>)> =
                if total > 0 || pruned || file_is_missing(&self.file) {
                    known
                        .vectors
                        .iter()
                        .map(|(key, vector)| (*key, Arc::clone(vector)))
                        .collect()
                } else {
                    Vec::new()
                };
            (table, snapshot)
        };
        if let Some(file) = self.file.clone().filter(|_| !snapshot.is_empty()) {
            let dims = table.dims;
            tokio::task::spawn_blocking(move || write_file(&file, &model_id, dims, &snapshot))
                .await
                .map_err(|error| EmbedError::Failed {
                    message: format!("writing the vectors failed: {error}"),
                })?
                .map_err(|error| EmbedError::Failed {
                    message: format!("writing the vectors failed: {}", error.kind()),
                })?;
        }
        let chunks = passages.len();
        *self.table.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(table));
        Ok(EmbedReport {
            chunks,
            reused: chunks - total,
            embedded: total,
        })
    }
}

fn file_is_missing(file: &Option<PathBuf>) -> bool {
    file.as_ref().is_some_and(|file| !file.exists())
}

/// The passage embedded for a chunk: title, heading path, text.
pub(crate) fn passage_text(title: &str, heading_path: &[String], text: &str) -> String {
    let mut passage = String::with_capacity(title.len() + text.len() + 64);
    passage.push_str(title);
    if !heading_path.is_empty() {
        passage.push('\n');
        passage.push_str(&heading_path.join(" > "));
    }
    passage.push('\n');
    passage.push_str(text);
    passage
}

fn passages(searcher: &Searcher, fields: &Fields) -> Vec<Passage> {
    let mut passages = Vec::new();
    for (ordinal, segment) in searcher.segment_readers().iter().enumerate() {
        let Ok(segment_ord) = u32::try_from(ordinal) else {
            break;
        };
        for doc in segment.doc_ids_alive() {
            let address = DocAddress::new(segment_ord, doc);
            // A chunk that cannot be read has no vector: it is searched by
            // BM25 alone.
            let Ok(hit) = super::hit_at(fields, searcher, address, 0.0) else {
                continue;
            };
            let passage = passage_text(&hit.title, &hit.heading_path, &hit.text);
            let key: ChunkKey = Sha256::digest(passage.as_bytes()).into();
            passages.push(Passage {
                address,
                key,
                text: passage,
            });
        }
    }
    passages
}

type FileContents = (String, usize, Vec<(ChunkKey, Arc<[f32]>)>);

fn read_file(path: &Path) -> io::Result<FileContents> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.read_to_end(&mut bytes)?;
    let mut rest = bytes
        .strip_prefix(FILE_MAGIC.as_slice())
        .ok_or_else(|| invalid("not a vectors file"))?;
    let mut take = |n: usize| -> io::Result<&[u8]> {
        if rest.len() < n {
            return Err(invalid("truncated vectors file"));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let u32_at = |bytes: &[u8]| {
        let mut word = [0_u8; 4];
        word.copy_from_slice(bytes);
        u32::from_le_bytes(word)
    };
    let model_len = u32_at(take(4)?) as usize;
    let model = String::from_utf8(take(model_len)?.to_vec()).map_err(|_| invalid("model id"))?;
    let dims = u32_at(take(4)?) as usize;
    let count = u32_at(take(4)?) as usize;
    if dims == 0 || dims > 65_536 {
        return Err(invalid("dimensions"));
    }
    let mut vectors = Vec::with_capacity(count.min(1 << 20));
    for _ in 0..count {
        let mut key = [0_u8; 32];
        key.copy_from_slice(take(32)?);
        let vector: Vec<f32> = take(dims * 4)?
            .chunks_exact(4)
            .map(|word| f32::from_bits(u32_at(word)))
            .collect();
        if vector.iter().any(|x| !x.is_finite()) {
            return Err(invalid("non-finite vector"));
        }
        vectors.push((key, Arc::from(vector)));
    }
    if !rest.is_empty() {
        return Err(invalid("trailing bytes"));
    }
    Ok((model, dims, vectors))
}

fn write_file(
    path: &Path,
    model: &str,
    dims: usize,
    vectors: &[(ChunkKey, Arc<[f32]>)],
) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent"))?;
    std::fs::create_dir_all(dir)?;
    let too_big = |_| io::Error::new(io::ErrorKind::InvalidInput, "too large");
    let mut out = Vec::with_capacity(16 + model.len() + vectors.len() * (32 + dims * 4));
    out.extend_from_slice(FILE_MAGIC);
    out.extend_from_slice(&u32::try_from(model.len()).map_err(too_big)?.to_le_bytes());
    out.extend_from_slice(model.as_bytes());
    out.extend_from_slice(&u32::try_from(dims).map_err(too_big)?.to_le_bytes());
    out.extend_from_slice(&u32::try_from(vectors.len()).map_err(too_big)?.to_le_bytes());
    for (key, vector) in vectors {
        out.extend_from_slice(key);
        for x in vector.iter() {
            out.extend_from_slice(&x.to_bits().to_le_bytes());
        }
    }
    let temporary = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("vectors"),
        std::process::id()
    ));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(&out)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vectors_file_round_trips_and_rejects_damage() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let path = dir.path().join("v/model.bin");
        let vectors = vec![
            ([1_u8; 32], Arc::from(vec![0.6_f32, 0.8])),
            ([2_u8; 32], Arc::from(vec![1.0_f32, 0.0])),
        ];
        write_file(&path, "model-a", 2, &vectors).unwrap_or_else(|error| panic!("{error}"));
        let (model, dims, read) = read_file(&path).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!((model.as_str(), dims), ("model-a", 2));
        assert_eq!(read, vectors);
        let mut bytes = std::fs::read(&path).unwrap_or_default();
        bytes.pop();
        std::fs::write(&path, &bytes).unwrap_or_default();
        assert!(read_file(&path).is_err());
    }

    #[test]
    fn dot_matches_the_naive_sum() {
        let a: Vec<f32> = (0..387).map(|i| (i as f32).sin()).collect();
        let b: Vec<f32> = (0..387).map(|i| (i as f32).cos()).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-3);
    }
}
