//! Changeset XML (SPEC §3): a streaming reader that hands each action to a callback as
//! soon as it is complete, and a writer for the documents the engine produces itself
//! (checkpoints).

mod reader;
mod writer;

#[cfg(feature = "oracle")]
pub use reader::read_changeset_quick_xml;
pub use reader::{read_changeset, ParseError, ReadSummary};
pub use writer::{escape_xml, ChangesetWriter};

use discern_model::{Record, Value};

/// One action of a changeset, with the item id already resolved (locator form included).
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Replace the whole record (create if absent).
    Set { id: String, record: Record },
    /// Create an empty record if absent.
    Add { id: String },
    /// Merge properties into the record (create if absent).
    AddTo { id: String, record: Record },
    /// Remove properties or values.
    RemoveFrom { id: String, what: RemoveWhat },
    /// Delete the item.
    Remove { id: String },
}

impl Action {
    pub fn id(&self) -> &str {
        match self {
            Action::Set { id, .. }
            | Action::Add { id }
            | Action::AddTo { id, .. }
            | Action::RemoveFrom { id, .. }
            | Action::Remove { id } => id,
        }
    }
    pub fn element_name(&self) -> &'static str {
        match self {
            Action::Set { .. } => "set-item",
            Action::Add { .. } => "add-item",
            Action::AddTo { .. } => "add-to-item",
            Action::RemoveFrom { .. } => "remove-from-item",
            Action::Remove { .. } => "remove-item",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum RemoveWhat {
    /// `<all/>`: every property.
    All,
    /// Per entry: `None` removes the property, `Some(values)` removes those values.
    Entries(RemovalEntries),
}

/// `remove-from-item` entries: property name and the values to remove (`None`: all).
pub type RemovalEntries = Vec<(String, Option<Vec<Value>>)>;
