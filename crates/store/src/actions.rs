//! What each action of a changeset does to the item store (SPEC §4): which actions a
//! changeset's type allows, and set, add, add-to, remove-from and remove on one stored
//! record, each change counted and handed to the index side.

use std::collections::HashSet;

use discern_changeset::{Action, RemoveWhat};
use discern_model::{decode_record, encode_record, Error, Record, Result, Value};
use redb::{ReadableTable, Table};

use crate::apply::ItemChange;
use crate::db_err;
use crate::meta::ChangesetType;

/// Items an apply created, modified and deleted (statistics, SPEC §11).
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) created: u64,
    pub(crate) modified: u64,
    pub(crate) deleted: u64,
}

/// The ids a replacing apply (snapshot, full, bulk) has named so far, where it needs
/// them: to remove the items it did not name, and to refuse a bulk's repeated id.
pub(crate) enum Named {
    /// Not needed: not a replacing apply, or a snapshot or full apply into an empty
    /// store (every item it leaves, it named).
    Unneeded,
    /// A bulk into an empty store: not needed either, and its repeated id is an item its
    /// insert finds already stored (`only_creates`).
    BulkIntoEmpty,
    Kept(HashSet<String>),
}

impl Named {
    pub(crate) fn new(ty: ChangesetType, started_empty: bool) -> Named {
        match (ty.replaces_all(), started_empty) {
            (true, false) => Named::Kept(HashSet::new()),
            (true, true) if ty == ChangesetType::Bulk => Named::BulkIntoEmpty,
            _ => Named::Unneeded,
        }
    }

    /// Whether an item an action finds already stored was named before: a bulk into an
    /// empty store, whose set-items only create.
    pub(crate) fn only_creates(&self) -> bool {
        matches!(self, Named::BulkIntoEmpty)
    }
}

fn repeated_in_bulk(id: &str) -> Error {
    Error::bad(format!(
        "invalid changeset: type=bulk names item {id:?} more than once"
    ))
}

pub(crate) fn check_allowed(ty: ChangesetType, action: &Action, named: &mut Named) -> Result<()> {
    match ty {
        ChangesetType::Full | ChangesetType::Bulk if !matches!(action, Action::Set { .. }) => {
            return Err(Error::bad(format!(
                "invalid changeset: type={} allows only set-item, found <{} id={:?}>",
                ty.as_str(),
                action.element_name(),
                action.id()
            )))
        }
        _ => {}
    }
    if let Named::Kept(named) = named {
        let fresh = named.insert(action.id().to_string());
        if !fresh && ty == ChangesetType::Bulk {
            return Err(repeated_in_bulk(action.id()));
        }
    }
    Ok(())
}

pub(crate) fn apply_action(
    items: &mut Table<&str, &[u8]>,
    action: Action,
    counts: &mut Counts,
    scratch: &mut Vec<u8>,
    only_creates: bool,
    on_change: &mut dyn FnMut(ItemChange) -> Result<()>,
) -> Result<()> {
    let load = |items: &Table<&str, &[u8]>, id: &str| -> Result<Option<Record>> {
        match items.get(id).map_err(db_err)? {
            Some(v) => Ok(Some(decode_record(v.value()).map_err(db_err)?)),
            None => Ok(None),
        }
    };
    let mut put = |items: &mut Table<&str, &[u8]>,
                   id: String,
                   rec: Record,
                   counts: &mut Counts|
     -> Result<()> {
        scratch.clear();
        encode_record(&rec, scratch);
        let existed = items
            .insert(id.as_str(), scratch.as_slice())
            .map_err(db_err)?
            .is_some();
        if existed && only_creates {
            return Err(repeated_in_bulk(&id));
        }
        if existed {
            counts.modified += 1;
        } else {
            counts.created += 1;
        }
        on_change(ItemChange::Upsert(id, rec))
    };
    match action {
        Action::Set { id, record } => put(items, id, record, counts),
        Action::Add { id } => {
            if load(items, &id)?.is_none() {
                put(items, id, Record::new(), counts)?;
            }
            Ok(())
        }
        Action::AddTo { id, record } => {
            let mut rec = load(items, &id)?.unwrap_or_default();
            for (k, v) in record.0 {
                merge_into(&mut rec, k, v);
            }
            put(items, id, rec, counts)
        }
        Action::RemoveFrom { id, what } => {
            let Some(mut rec) = load(items, &id)? else {
                return Ok(());
            };
            match what {
                RemoveWhat::All => rec.0.clear(),
                RemoveWhat::Entries(entries) => {
                    for (k, vals) in entries {
                        match vals {
                            None => {
                                rec.remove(&k);
                            }
                            Some(vals) => remove_values(&mut rec, &k, &vals),
                        }
                    }
                }
            }
            put(items, id, rec, counts)
        }
        Action::Remove { id } => {
            let existed = items.remove(id.as_str()).map_err(db_err)?.is_some();
            if existed {
                counts.deleted += 1;
                on_change(ItemChange::Delete(id))?;
            }
            Ok(())
        }
    }
}

/// add-to-item on one property: absent → set; present → array of old then new values,
/// skipping values already present.
fn merge_into(rec: &mut Record, name: String, new: Value) {
    let Some(old) = rec.get_mut(&name) else {
        rec.set(name, new);
        return;
    };
    let mut values = match std::mem::replace(old, Value::Array(Vec::new())) {
        Value::Array(v) => v,
        other => vec![other],
    };
    let before = values.len();
    let was_array = matches!(old, Value::Array(_));
    let incoming = match new {
        Value::Array(v) => v,
        other => vec![other],
    };
    for v in incoming {
        if !values.contains(&v) {
            values.push(v);
        }
    }
    *old = if values.len() == before && before == 1 && !was_array {
        values.pop().unwrap_or(Value::Array(Vec::new()))
    } else {
        Value::Array(values)
    };
}

fn remove_values(rec: &mut Record, name: &str, vals: &[Value]) {
    let Some(cur) = rec.get_mut(name) else { return };
    match cur {
        Value::Array(items) => {
            items.retain(|v| !vals.contains(v));
            if items.is_empty() {
                rec.remove(name);
            }
        }
        other => {
            if vals.contains(other) {
                rec.remove(name);
            }
        }
    }
}
