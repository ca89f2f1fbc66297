//! Sealing runs and signing checkpoints over them.
//!
//! A run is sealed when it can take no more calls: its deadline passed, or
//! nothing was archived for it for the idle time. Its seal is its count and
//! head chain hash. Every batch of runs sealed together gets a checkpoint: a
//! Merkle tree (RFC 6962: leaves `H(0x00 ‖ leaf)`, nodes `H(0x01 ‖ left ‖
//! right)`) over the seals in order, each leaf `run_id ‖ 0x00 ‖ count (8
//! bytes, big-endian) ‖ head`, and a note in the C2SP signed-note format,
//! signed with Ed25519:
//!
//! ```text
//! aci-archive/checkpoint
//! <number of seals>
//! <base64 Merkle root>
//!
//! — aci-archive <base64 of key id (4 bytes) ‖ signature>
//! ```
//!
//! The key id is the first 4 bytes of `SHA-256("aci-archive" ‖ 0x0A ‖ 0x01 ‖
//! public key)` (0x01: Ed25519), as the signed-note format defines it.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::pkcs8::DecodePrivateKey as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::insert::run_lock;
use crate::record::{GENESIS, Hash};
use crate::{Archive, ArchiveError, Result};

/// The signer name in notes.
pub const KEY_NAME: &str = "aci-archive";
/// The first line of a checkpoint note.
pub const ORIGIN: &str = "aci-archive/checkpoint";

/// The Ed25519 key that signs checkpoints.
#[derive(Clone)]
pub struct CheckpointKey(SigningKey);

impl std::fmt::Debug for CheckpointKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointKey").finish_non_exhaustive()
    }
}

impl CheckpointKey {
    /// From a PKCS#8 PEM (`openssl genpkey -algorithm ed25519`).
    ///
    /// # Errors
    /// [`ArchiveError::InvalidKey`]; the error never holds the key.
    pub fn from_pem(pem: &str) -> Result<Self> {
        SigningKey::from_pkcs8_pem(pem)
            .map(Self)
            .map_err(|_| ArchiveError::InvalidKey)
    }

    /// From 32 secret bytes.
    #[must_use]
    pub fn from_bytes(secret: &[u8; 32]) -> Self {
        Self(SigningKey::from_bytes(secret))
    }

    /// The public half, for verification.
    #[must_use]
    pub fn verifying_key(&self) -> VerifyingKey {
        self.0.verifying_key()
    }
}

fn key_id(key: &VerifyingKey) -> [u8; 4] {
    let mut hasher = Sha256::new();
    hasher.update(KEY_NAME.as_bytes());
    hasher.update([0x0a, 0x01]);
    hasher.update(key.as_bytes());
    let digest = hasher.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

/// A seal's Merkle leaf data.
fn leaf(run_id: &str, count: i64, head: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(run_id.len() + 41);
    data.extend_from_slice(run_id.as_bytes());
    data.push(0);
    data.extend_from_slice(&count.to_be_bytes());
    data.extend_from_slice(head);
    data
}

/// RFC 6962 Merkle tree hash of `leaves`.
fn merkle_root(leaves: &[Vec<u8>]) -> Hash {
    match leaves {
        [] => Sha256::digest([]).into(),
        [one] => {
            let mut hasher = Sha256::new();
            hasher.update([0]);
            hasher.update(one);
            hasher.finalize().into()
        }
        _ => {
            let mut split = 1;
            while split * 2 < leaves.len() {
                split *= 2;
            }
            let mut hasher = Sha256::new();
            hasher.update([1]);
            hasher.update(merkle_root(&leaves[..split]));
            hasher.update(merkle_root(&leaves[split..]));
            hasher.finalize().into()
        }
    }
}

fn note_body(size: usize, root: &Hash) -> String {
    format!("{ORIGIN}\n{size}\n{}\n", STANDARD.encode(root))
}

/// Signs a checkpoint note over `root`.
fn sign_note(key: &CheckpointKey, size: usize, root: &Hash) -> String {
    let body = note_body(size, root);
    let signature = key.0.sign(body.as_bytes());
    let mut blob = key_id(&key.verifying_key()).to_vec();
    blob.extend_from_slice(&signature.to_bytes());
    format!("{body}\n\u{2014} {KEY_NAME} {}\n", STANDARD.encode(blob))
}

/// Whether `note` is a checkpoint over `size` seals with `root`, signed by
/// `key`.
pub(crate) fn note_is_valid(note: &str, size: usize, root: &Hash, key: &VerifyingKey) -> bool {
    let body = note_body(size, root);
    let Some(rest) = note.strip_prefix(&body) else {
        return false;
    };
    let prefix = format!("\n\u{2014} {KEY_NAME} ");
    rest.lines()
        .skip(1)
        .filter_map(|line| line.strip_prefix(&prefix[1..]))
        .filter_map(|b64| STANDARD.decode(b64.trim_end()).ok())
        .any(|blob| {
            blob.len() == 68
                && blob[..4] == key_id(key)
                && Signature::from_slice(&blob[4..])
                    .is_ok_and(|sig| key.verify_strict(body.as_bytes(), &sig).is_ok())
        })
}

/// A seal as verification needs it.
#[derive(Debug, Clone)]
pub(crate) struct SealRow {
    pub(crate) count: i64,
    pub(crate) head: Vec<u8>,
    pub(crate) checkpoint: Option<i64>,
}

impl Archive {
    /// Seals every run that can take no more calls (deadline passed, or no
    /// call archived for `idle`), and signs one checkpoint over them.
    /// Returns how many runs it sealed.
    ///
    /// # Errors
    /// [`ArchiveError::Unavailable`].
    pub async fn seal_idle_runs(
        &self,
        key: &CheckpointKey,
        idle: Duration,
        now_ms: i64,
    ) -> Result<usize> {
        let idle_ms = i64::try_from(idle.as_millis()).unwrap_or(i64::MAX);
        let mut client = self.client().await?;
        let unavailable = ArchiveError::unavailable("seal");
        let tx = client.transaction().await.map_err(&unavailable)?;
        let candidates = tx
            .query(
                "SELECT r.run_id FROM aci_runs r
                 WHERE NOT EXISTS (SELECT 1 FROM aci_seals s WHERE s.run_id = r.run_id)
                   AND ((r.deadline_ms IS NOT NULL AND r.deadline_ms < $1)
                     OR NOT EXISTS (SELECT 1 FROM aci_calls c WHERE c.run_id = r.run_id
                                    AND c.archived_at > now() - make_interval(secs => $2::float8 / 1000)))
                 ORDER BY r.run_id LIMIT 1000",
                &[&now_ms, &(idle_ms as f64)],
            )
            .await
            .map_err(&unavailable)?;
        let mut runs: Vec<String> = candidates.iter().map(|r| r.get(0)).collect();
        if runs.is_empty() {
            return Ok(0);
        }
        runs.sort_by_key(|run| run_lock(run));
        for run in &runs {
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&run_lock(run)])
                .await
                .map_err(&unavailable)?;
        }
        runs.sort();
        let mut seals = Vec::with_capacity(runs.len());
        for run in &runs {
            let head = tx
                .query_opt(
                    "SELECT seq, chain_hash FROM aci_calls WHERE run_id = $1 ORDER BY seq DESC LIMIT 1",
                    &[run],
                )
                .await
                .map_err(&unavailable)?;
            let (count, head) = head.map_or((0, GENESIS.to_vec()), |row| {
                (row.get::<_, i64>(0), row.get::<_, Vec<u8>>(1))
            });
            seals.push((run.clone(), count, head));
        }
        let leaves: Vec<Vec<u8>> = seals.iter().map(|(r, c, h)| leaf(r, *c, h)).collect();
        let root = merkle_root(&leaves);
        let size = i32::try_from(seals.len()).unwrap_or(i32::MAX);
        let note = sign_note(key, seals.len(), &root);
        let checkpoint: i64 = tx
            .query_one(
                "INSERT INTO aci_checkpoints (size, root, note) VALUES ($1, $2, $3) RETURNING id",
                &[&size, &root.as_slice(), &note],
            )
            .await
            .map_err(&unavailable)?
            .get(0);
        for (index, (run, count, head)) in seals.iter().enumerate() {
            let index = i32::try_from(index).unwrap_or(i32::MAX);
            tx.execute(
                "INSERT INTO aci_seals (run_id, count, head, checkpoint_id, checkpoint_index)
                 VALUES ($1, $2, $3, $4, $5)",
                &[run, count, head, &checkpoint, &index],
            )
            .await
            .map_err(&unavailable)?;
        }
        tx.commit().await.map_err(&unavailable)?;
        Ok(seals.len())
    }

    /// Whether checkpoint `id` is signed by `key` over exactly the seals
    /// that name it.
    pub(crate) async fn checkpoint_is_valid(&self, id: i64, key: &VerifyingKey) -> Result<bool> {
        let client = self.client().await?;
        let unavailable = ArchiveError::unavailable("verify");
        let Some(row) = client
            .query_opt(
                "SELECT size, note FROM aci_checkpoints WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(&unavailable)?
        else {
            return Ok(false);
        };
        let size: i32 = row.get(0);
        let note: String = row.get(1);
        let seals = client
            .query(
                "SELECT run_id, count, head FROM aci_seals WHERE checkpoint_id = $1
                 ORDER BY checkpoint_index",
                &[&id],
            )
            .await
            .map_err(&unavailable)?;
        let leaves: Vec<Vec<u8>> = seals
            .iter()
            .map(|r| leaf(r.get::<_, &str>(0), r.get(1), r.get::<_, &[u8]>(2)))
            .collect();
        Ok(usize::try_from(size).is_ok_and(|s| s == leaves.len())
            && note_is_valid(&note, leaves.len(), &merkle_root(&leaves), key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_verify_only_with_their_key_and_root() {
        let key = CheckpointKey::from_bytes(&[7; 32]);
        let other = CheckpointKey::from_bytes(&[8; 32]);
        let leaves = vec![leaf("r1", 3, &[1; 32]), leaf("r2", 1, &[2; 32])];
        let root = merkle_root(&leaves);
        let note = sign_note(&key, 2, &root);
        assert!(note.starts_with("aci-archive/checkpoint\n2\n"));
        assert!(note_is_valid(&note, 2, &root, &key.verifying_key()));
        assert!(!note_is_valid(&note, 2, &root, &other.verifying_key()));
        let forged_root = merkle_root(&[leaf("r1", 2, &[1; 32]), leaf("r2", 1, &[2; 32])]);
        assert!(!note_is_valid(&note, 2, &forged_root, &key.verifying_key()));
        assert!(!note_is_valid(&note, 3, &root, &key.verifying_key()));
    }

    #[test]
    fn merkle_roots_follow_rfc_6962() {
        // RFC 6962 §2.1: MTH({}) = SHA-256(); one leaf: SHA-256(0x00 ‖ d).
        let empty: Hash = Sha256::digest([]).into();
        assert_eq!(merkle_root(&[]), empty);
        let three = merkle_root(&[vec![1], vec![2], vec![3]]);
        let mut left = Sha256::new();
        left.update([1]);
        left.update(merkle_root(&[vec![1], vec![2]]));
        left.update(merkle_root(&[vec![3]]));
        let expected: Hash = left.finalize().into();
        assert_eq!(three, expected);
    }

    #[test]
    fn a_pem_key_is_read_and_a_bad_one_refused() {
        let pem = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n-----END PRIVATE KEY-----\n";
        assert!(CheckpointKey::from_pem(pem).is_ok());
        assert!(CheckpointKey::from_pem("not a key").is_err());
    }
}
