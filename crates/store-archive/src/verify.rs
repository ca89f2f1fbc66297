//! Reading a run back, and verifying it by recomputation.

use aci_contracts::Timestamp;
use invocation_core::RunState;
use tokio_postgres::Row;

use ed25519_dalek::VerifyingKey;

use crate::record::{GENESIS, chain};
use crate::seal::SealRow;
use crate::{Archive, ArchiveError, ArchivedCall, Result};

/// An archived call as stored: its position, the call, its hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCall {
    /// Its position in the run's chain (1, 2, …).
    pub seq: i64,
    /// The call.
    pub call: ArchivedCall,
    /// The stored leaf hash.
    pub leaf_hash: Vec<u8>,
    /// The stored chain hash.
    pub chain_hash: Vec<u8>,
}

/// What is wrong with the first bad record of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// A record is missing at this position.
    Missing,
    /// The record's content does not match its leaf hash.
    Altered,
    /// The record does not follow from the one before it.
    Reordered,
    /// A record that the chain or the seal does not account for.
    Added,
    /// The run's seal is not in a checkpoint signed by the key, or the
    /// checkpoint does not cover exactly its seals.
    Checkpoint,
}

impl Problem {
    /// Lower-case name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Altered => "altered",
            Self::Reordered => "reordered",
            Self::Added => "added",
            Self::Checkpoint => "checkpoint",
        }
    }
}

/// The result of [`Archive::verify_run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The archive has no such run.
    NotFound,
    /// Every hash recomputes, positions run 1..=records without gap, and a
    /// sealed run has exactly its sealed count and head.
    Intact {
        /// Calls in the run.
        records: u64,
        /// Whether the run is sealed.
        sealed: bool,
    },
    /// The first bad record.
    Broken {
        /// What is wrong.
        problem: Problem,
        /// Its position.
        seq: i64,
        /// Its tool call id, when the record is there (not for a missing one).
        tool_call_id: Option<String>,
    },
}

fn stored(row: &Row) -> StoredCall {
    StoredCall {
        seq: row.get("seq"),
        call: ArchivedCall {
            run_id: row.get("run_id"),
            tool_call_id: row.get("tool_call_id"),
            tool_name: row.get("tool_name"),
            status: row.get("status"),
            evidence_status: row.get("evidence_status"),
            error_code: row.get("error_code"),
            retryable: row.get("retryable"),
            scope_fp: row.get("scope_fp"),
            created_at_ms: row.get("created_at_ms"),
            finished_at_ms: row.get("finished_at_ms"),
            replayed_from: row.get("replayed_from"),
            redactions: row.get("redactions"),
            request: row.get("request"),
            scope: row.get("scope"),
            result: row.get("result"),
            raw: row.get("raw"),
            raw_sha256: row.get("raw_sha256"),
            raw_mode: row.get("raw_mode"),
            request_bytes: row.get("request_bytes"),
            raw_bytes: row.get("raw_bytes"),
            result_bytes: row.get("result_bytes"),
            timings_us: row.get("timings_us"),
        },
        leaf_hash: row.get("leaf_hash"),
        chain_hash: row.get("chain_hash"),
    }
}

fn broken(problem: Problem, seq: i64, tool_call_id: Option<&str>) -> Verdict {
    Verdict::Broken {
        problem,
        seq,
        tool_call_id: tool_call_id.map(str::to_owned),
    }
}

/// Recomputes a run's chain against its rows (in `seq` order) and its seal.
fn check(rows: &[StoredCall], seal: Option<(i64, &[u8])>) -> Verdict {
    let mut expected = 1_i64;
    let mut previous = GENESIS;
    for row in rows {
        let id = Some(row.call.tool_call_id.as_str());
        if row.seq < expected {
            return broken(Problem::Added, row.seq, id);
        }
        if row.seq > expected {
            return broken(Problem::Missing, expected, None);
        }
        let leaf = row.call.leaf_hash();
        if leaf.as_slice() != row.leaf_hash.as_slice() {
            return broken(Problem::Altered, row.seq, id);
        }
        let linked = chain(&previous, &leaf);
        if linked.as_slice() != row.chain_hash.as_slice() {
            return broken(Problem::Reordered, row.seq, id);
        }
        if let Some((count, _)) = seal
            && row.seq > count
        {
            return broken(Problem::Added, row.seq, id);
        }
        previous = linked;
        expected += 1;
    }
    let records = expected - 1;
    if let Some((count, head)) = seal {
        if records < count {
            return broken(Problem::Missing, records + 1, None);
        }
        if previous.as_slice() != head {
            let last = rows.last().map(|r| r.call.tool_call_id.as_str());
            return broken(Problem::Altered, records, last);
        }
    }
    Verdict::Intact {
        records: u64::try_from(records).unwrap_or(0),
        sealed: seal.is_some(),
    }
}

impl Archive {
    /// A run's archived calls in chain order (`seq`, then tool call id).
    ///
    /// # Errors
    /// [`ArchiveError::Unavailable`].
    pub async fn calls(&self, run_id: &str) -> Result<Vec<StoredCall>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT * FROM aci_calls WHERE run_id = $1 ORDER BY seq, tool_call_id",
                &[&run_id],
            )
            .await
            .map_err(ArchiveError::unavailable("read"))?;
        Ok(rows.iter().map(stored).collect())
    }

    /// A run's state as archived (`aci_runs`, written by the run's first
    /// archived call): its owner, start and deadline. A run archived without
    /// its store state has no owner, and starts at its first call. `None`
    /// when the archive has no such run.
    ///
    /// # Errors
    /// [`ArchiveError::Unavailable`].
    pub async fn run_state(&self, run_id: &str) -> Result<Option<RunState>> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT r.owner,
                        coalesce(r.started_at_ms,
                          (SELECT min(c.created_at_ms) FROM aci_calls c WHERE c.run_id = r.run_id)),
                        r.deadline_ms
                 FROM aci_runs r WHERE r.run_id = $1",
                &[&run_id],
            )
            .await
            .map_err(ArchiveError::unavailable("read"))?;
        Ok(row.map(|row| RunState {
            owner: row.get(0),
            started_at: Timestamp::from_unix_millis(row.get::<_, Option<i64>>(1).unwrap_or(0)),
            deadline: row
                .get::<_, Option<i64>>(2)
                .map(Timestamp::from_unix_millis),
        }))
    }

    /// Recomputes a run's leaf and chain hashes, positions and seal; with
    /// `key`, also the signed checkpoint that holds a sealed run's seal
    /// (without it the seal row is taken as it is).
    ///
    /// # Errors
    /// [`ArchiveError::Unavailable`].
    pub async fn verify_run(&self, run_id: &str, key: Option<&VerifyingKey>) -> Result<Verdict> {
        let rows = self.calls(run_id).await?;
        let client = self.client().await?;
        let seal = client
            .query_opt(
                "SELECT count, head, checkpoint_id FROM aci_seals WHERE run_id = $1",
                &[&run_id],
            )
            .await
            .map_err(ArchiveError::unavailable("verify"))?
            .map(|row| SealRow {
                count: row.get(0),
                head: row.get(1),
                checkpoint: row.get(2),
            });
        let known = client
            .query_opt("SELECT 1 FROM aci_runs WHERE run_id = $1", &[&run_id])
            .await
            .map_err(ArchiveError::unavailable("verify"))?;
        drop(client);
        if rows.is_empty() && seal.is_none() && known.is_none() {
            return Ok(Verdict::NotFound);
        }
        let verdict = check(&rows, seal.as_ref().map(|s| (s.count, s.head.as_slice())));
        if let (Verdict::Intact { .. }, Some(seal), Some(key)) = (&verdict, &seal, key) {
            let signed = match seal.checkpoint {
                Some(id) => self.checkpoint_is_valid(id, key).await?,
                None => false,
            };
            if !signed {
                return Ok(broken(Problem::Checkpoint, seal.count, None));
            }
        }
        Ok(verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ArchivedCall {
        ArchivedCall {
            run_id: "r".into(),
            tool_call_id: id.into(),
            tool_name: "t".into(),
            status: "READY".into(),
            evidence_status: Some("NO_EVIDENCE".into()),
            error_code: None,
            retryable: None,
            scope_fp: "00".into(),
            created_at_ms: 1,
            finished_at_ms: 2,
            replayed_from: None,
            redactions: "{}".into(),
            request: Some("{}".into()),
            scope: None,
            result: Some("{}".into()),
            raw: None,
            raw_sha256: None,
            raw_mode: "none".into(),
            request_bytes: 2,
            raw_bytes: None,
            result_bytes: Some(2),
            timings_us: None,
        }
    }

    fn chained(ids: &[&str]) -> Vec<StoredCall> {
        let mut previous = GENESIS;
        ids.iter()
            .zip(1..)
            .map(|(id, seq)| {
                let call = call(id);
                let leaf = call.leaf_hash();
                previous = chain(&previous, &leaf);
                StoredCall {
                    seq,
                    call,
                    leaf_hash: leaf.to_vec(),
                    chain_hash: previous.to_vec(),
                }
            })
            .collect()
    }

    #[test]
    fn each_kind_of_tampering_names_its_record() {
        let rows = chained(&["a", "b", "c"]);
        let head = rows[2].chain_hash.clone();
        assert_eq!(
            check(&rows, Some((3, &head))),
            Verdict::Intact {
                records: 3,
                sealed: true
            }
        );

        let mut altered = rows.clone();
        altered[1].call.result = Some("{\"x\":1}".into());
        assert_eq!(
            check(&altered, None),
            broken(Problem::Altered, 2, Some("b"))
        );

        let mut gap = rows.clone();
        gap.remove(1);
        assert_eq!(check(&gap, None), broken(Problem::Missing, 2, None));

        let last_gone = &rows[..2];
        assert_eq!(
            check(last_gone, Some((3, &head))),
            broken(Problem::Missing, 3, None)
        );

        let mut swapped = rows.clone();
        swapped.swap(0, 1);
        swapped[0].seq = 1;
        swapped[1].seq = 2;
        assert_eq!(
            check(&swapped, None),
            broken(Problem::Reordered, 1, Some("b"))
        );

        let mut forged = chained(&["a", "b", "c", "d"]);
        assert_eq!(
            check(&forged, Some((3, &head))),
            broken(Problem::Added, 4, Some("d"))
        );
        // A forged row at a taken position, listed after the real one.
        forged.insert(3, chained(&["a", "b", "x"]).remove(2));
        assert_eq!(check(&forged, None), broken(Problem::Added, 3, Some("x")));
    }
}
