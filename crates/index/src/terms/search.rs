//! Searching a dictionary for the terms near a word (SPEC §9): each tier answers for
//! the terms no newer tier holds; a tier's FST is walked with a Levenshtein automaton
//! (in parallel over key ranges when large), or — for long ASCII words at distance 2 —
//! by the split search over the forward and reversed terms.

use std::sync::{Arc, OnceLock};

use fst::{IntoStreamer, Streamer};
use levenshtein_automata::{Distance, DFA, SINK_STATE};
use rayon::prelude::*;

use super::{Base, TermDict};
use crate::fuzzy::{builder, lev2, ExactThenLev, FirstHalfLev, Lev};

/// A half-open range of keys `[lo, hi)`; `None` is unbounded.
type KeyRange<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Terms at least this long (in bytes) use the split search when it is available.
const SPLIT_MIN_LEN: usize = 8;
/// Longest term the split search takes (the automaton's key position is a usize; the
/// bound only keeps absurd inputs on the plain path).
const SPLIT_MAX_LEN: usize = 256;

impl TermDict {
    /// Indexed terms within `max` edits of `term` (transpositions count 1 when
    /// `transpositions`), as (term, distance, document frequency), the term itself
    /// included when indexed.
    pub fn within(&self, term: &str, max: u8, transpositions: bool) -> Vec<(String, u8, u32)> {
        // the automaton costs more to build than the split search does to run, so it is
        // built only where it is needed
        let dfa = OnceLock::new();
        let dfa = || dfa.get_or_init(|| builder(max, transpositions).build_dfa(term));
        let split = max == 2
            && !transpositions
            && term.is_ascii()
            && (SPLIT_MIN_LEN..=SPLIT_MAX_LEN).contains(&term.len());
        // each tier answers for the terms no newer tier holds
        let newer = |tiers: &[Arc<Base>], k: &str| {
            self.overlay.contains_key(k) || tiers.iter().any(|r| r.map.contains_key(k))
        };
        let mut out = self
            .base
            .within(term, split, &dfa, &|k: &str| newer(&self.recent, k));
        for (i, r) in self.recent.iter().enumerate() {
            let after = &self.recent[i + 1..];
            out.extend(r.within(term, split, &dfa, &|k: &str| newer(after, k)));
        }
        // an overlay term's distance: by the banded DP where the split search runs and
        // the term is ASCII (its length alone often rules it out), else by the automaton
        let distance = |k: &str| -> Option<u8> {
            if split && k.is_ascii() {
                return (k.len().abs_diff(term.len()) <= 2)
                    .then(|| lev2(term.as_bytes(), k.as_bytes()))
                    .flatten();
            }
            let dfa = dfa();
            let mut s = dfa.initial_state();
            for &b in k.as_bytes() {
                s = dfa.transition(s, b);
                if s == SINK_STATE {
                    break;
                }
            }
            match dfa.distance(s) {
                Distance::Exact(d) => Some(d),
                Distance::AtLeast(_) => None,
            }
        };
        for (k, &(n, _)) in &self.overlay {
            if n == 0 {
                continue;
            }
            if let Some(d) = distance(k) {
                out.push((k.to_string(), d, n));
            }
        }
        out
    }
}

/// A term a newer tier answers for.
type Shadowed<'a> = dyn Fn(&str) -> bool + Sync + 'a;

impl Base {
    /// This tier's terms within the automaton's distance of `term`, those `shadowed`
    /// and those of frequency 0 (gone) left out; by the split search where `split`
    /// allows it and the reversed terms are kept.
    fn within<'d>(
        &self,
        term: &str,
        split: bool,
        dfa: &dyn Fn() -> &'d DFA,
        shadowed: &Shadowed<'_>,
    ) -> Vec<(String, u8, u32)> {
        match self.reversed.as_ref().filter(|_| split) {
            Some(rev) => self.within_split(term.as_bytes(), rev, shadowed),
            None => self.within_scan(dfa(), shadowed),
        }
    }

    /// Terms the automaton accepts, searched over the key ranges in parallel.
    fn within_scan(&self, dfa: &DFA, shadowed: &Shadowed<'_>) -> Vec<(String, u8, u32)> {
        let splits = &self.splits;
        let bounds: Vec<KeyRange> = (0..=splits.len())
            .map(|i| {
                (
                    i.checked_sub(1).map(|j| splits[j].as_slice()),
                    splits.get(i).map(Vec::as_slice),
                )
            })
            .collect();
        let search = |(lo, hi): &KeyRange| {
            let mut found = Vec::new();
            let mut q = self.map.search_with_state(Lev(dfa));
            if let Some(lo) = lo {
                q = q.ge(lo);
            }
            if let Some(hi) = hi {
                q = q.lt(hi);
            }
            let mut stream = q.into_stream();
            while let Some((k, v, state)) = stream.next() {
                let Ok(k) = std::str::from_utf8(k) else {
                    continue;
                };
                if v == 0 || shadowed(k) {
                    continue;
                }
                if let Distance::Exact(d) = dfa.distance(state) {
                    found.push((k.to_string(), d, v as u32));
                }
            }
            found
        };
        if bounds.len() > 1 {
            bounds.par_iter().flat_map_iter(search).collect()
        } else {
            bounds.iter().flat_map(search).collect()
        }
    }

    /// Terms within 2 edits of an ASCII `term`, without walking every key within 2
    /// edits of the term's first characters (the costly part of `within_scan` on a
    /// dense dictionary). Split `term` = `q1` + `q2` at its middle: a key within 2
    /// edits splits as `k1` + `k2` with d(k1, q1) + d(k2, q2) ≤ 2, so either
    /// d(k1, q1) ≤ 1 (found walking the keys with `FirstHalfLev`), or d(k1, q1) = 2
    /// and `k2` = `q2` (found walking the reversed keys that start with `q2`
    /// reversed). Each candidate's distance comes from the same banded DP, run over
    /// the whole term (`lev2`).
    fn within_split(
        &self,
        term: &[u8],
        reversed: &fst::Set<Vec<u8>>,
        shadowed: &Shadowed<'_>,
    ) -> Vec<(String, u8, u32)> {
        let m = term.len() / 2;
        let (q1, q2) = term.split_at(m);
        let keep = |k: &[u8], out: &mut Vec<(String, u8, u32)>| {
            let Ok(k) = std::str::from_utf8(k) else {
                return;
            };
            let Some(d) = lev2(term, k.as_bytes()) else {
                return;
            };
            let df = self.map.get(k).unwrap_or(0) as u32;
            if df > 0 && !shadowed(k) {
                out.push((k.to_string(), d, df));
            }
        };
        let (mut out, from_suffix) = rayon::join(
            || {
                let mut out = Vec::new();
                let mut stream = self.map.search(FirstHalfLev { q: term, m }).into_stream();
                while let Some((k, _)) = stream.next() {
                    keep(k, &mut out);
                }
                out
            },
            || {
                let rq2: Vec<u8> = q2.iter().rev().copied().collect();
                let rq1: Vec<u8> = q1.iter().rev().copied().collect();
                let rest = FirstHalfLev::plain(&rq1);
                let mut out = Vec::new();
                let mut key = Vec::new();
                let mut stream = reversed
                    .search(ExactThenLev { prefix: &rq2, rest })
                    .into_stream();
                while let Some(rk) = stream.next() {
                    key.clear();
                    key.extend(rk.iter().rev());
                    keep(&key, &mut out);
                }
                out
            },
        );
        let seen: std::collections::HashSet<String> =
            out.iter().map(|(k, _, _)| k.clone()).collect();
        out.extend(
            from_suffix
                .into_iter()
                .filter(|(k, _, _)| !seen.contains(k)),
        );
        out
    }
}
