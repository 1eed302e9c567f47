use discern_model::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangesetType {
    Delta,
    Snapshot,
    Full,
    Bulk,
    Reset,
    Checkpoint,
}

impl ChangesetType {
    /// The types a client may post (`checkpoint` is written by the engine only).
    pub fn parse_posted(s: &str) -> Result<ChangesetType> {
        Ok(match s {
            "delta" => ChangesetType::Delta,
            "snapshot" => ChangesetType::Snapshot,
            "full" => ChangesetType::Full,
            "bulk" => ChangesetType::Bulk,
            "reset" => ChangesetType::Reset,
            "checkpoint" => {
                return Err(Error::bad(
                    "type=checkpoint: checkpoints are written by the engine (POST /ws/checkpoint)",
                ))
            }
            other => {
                return Err(Error::bad(format!(
                    "type={other:?} is not a changeset type (delta, snapshot, full, bulk, reset)"
                )))
            }
        })
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            ChangesetType::Delta => "delta",
            ChangesetType::Snapshot => "snapshot",
            ChangesetType::Full => "full",
            ChangesetType::Bulk => "bulk",
            ChangesetType::Reset => "reset",
            ChangesetType::Checkpoint => "checkpoint",
        }
    }

    pub const ALL: [ChangesetType; 6] = [
        ChangesetType::Reset,
        ChangesetType::Delta,
        ChangesetType::Snapshot,
        ChangesetType::Full,
        ChangesetType::Bulk,
        ChangesetType::Checkpoint,
    ];

    /// Establishes a complete item state (listed `snapshot="true"`).
    pub fn is_complete_state(&self) -> bool {
        !matches!(self, ChangesetType::Delta)
    }

    /// Deletes every item the changeset does not name.
    pub fn replaces_all(&self) -> bool {
        matches!(
            self,
            ChangesetType::Snapshot | ChangesetType::Full | ChangesetType::Bulk
        )
    }
}

/// Catalog entry of a stored changeset (SPEC §5.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangesetMeta {
    pub seq: u64,
    pub id: String,
    pub ty: ChangesetType,
    /// Unix seconds when it was stored.
    pub date: u64,
    pub md5: String,
    pub length: u64,
    pub raw_length: u64,
}

impl ChangesetMeta {
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    pub(crate) fn decode(b: &[u8]) -> Result<ChangesetMeta> {
        serde_json::from_slice(b)
            .map_err(|e| Error::Internal(format!("corrupt catalog entry: {e}")))
    }
    pub fn http_date(&self) -> String {
        httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.date))
    }
}
