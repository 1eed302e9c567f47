//! Automata for did-you-mean's searches of the term FSTs (SPEC §9): the Levenshtein
//! DFA of the `levenshtein_automata` crate, and two banded Levenshtein DPs over ASCII
//! bytes for the split search of long terms (`TermDict::within_split`), cheaper to
//! start than a DFA and able to spend edits unevenly between a term's halves.

use std::sync::OnceLock;

use levenshtein_automata::{Distance, LevenshteinAutomatonBuilder, DFA, SINK_STATE};

/// Keys within 2 edits of `q` by an alignment that spends at most 1 edit on
/// `q[..m]`: the Levenshtein DP over `q`, with the cells of `q[..m]` dead above 1 and
/// the rest dead above 2. After `j` key bytes only the cells of query prefixes
/// `j - 2 ..= j + 2` can be alive (a cell is at least its distance from the diagonal),
/// so the state is that band.
pub(crate) struct FirstHalfLev<'a> {
    pub q: &'a [u8],
    pub m: usize,
}

/// A dead DP cell.
const DEAD: u8 = 3;
/// Cells per band: query prefixes j - 2 ..= j + 2.
const BAND: usize = 5;

/// Key bytes consumed and the band's cells (cell `k` is query prefix `j + k - 2`).
#[derive(Clone, Copy)]
pub(crate) struct Band {
    j: usize,
    cells: [u8; BAND],
}

impl<'a> FirstHalfLev<'a> {
    /// Plain Levenshtein distance ≤ 2 from `q` (no first half to restrict).
    pub fn plain(q: &'a [u8]) -> FirstHalfLev<'a> {
        FirstHalfLev { q, m: 0 }
    }

    /// The whole query's cell after the key bytes `s` has seen, when alive (at most 2).
    fn distance(&self, s: &Band) -> Option<u8> {
        // query prefix n sits at band cell n + 2 - j
        let k = (self.q.len() + 2).checked_sub(s.j)?;
        s.cells.get(k).copied().filter(|&c| c <= 2)
    }

    /// The DP cell for query prefix `i` from its candidates: through `q[..m]` (`i` ≤ `m`)
    /// an alignment may have spent 1 edit; past it, 2. At `i` = `m`, `inserted` (a key
    /// byte added after `q[..m]` was aligned) counts against the second half.
    #[inline]
    fn cell(&self, i: usize, aligned: u8, inserted: u8) -> u8 {
        let v = if i == self.m {
            (if aligned <= 1 { aligned } else { DEAD }).min(inserted)
        } else {
            aligned.min(inserted)
        };
        let limit = if i < self.m { 1 } else { 2 };
        if v > limit {
            DEAD
        } else {
            v
        }
    }
}

impl fst::Automaton for FirstHalfLev<'_> {
    type State = Band;
    fn start(&self) -> Band {
        // j = 0: prefix i costs i deletions
        let mut cells = [DEAD; BAND];
        cells[2] = 0;
        for k in 3..BAND {
            let i = k - 2;
            if i <= self.q.len() {
                cells[k] = self.cell(i, cells[k - 1].saturating_add(1), DEAD);
            }
        }
        Band { j: 0, cells }
    }
    fn is_match(&self, s: &Band) -> bool {
        self.distance(s).is_some()
    }
    fn can_match(&self, s: &Band) -> bool {
        s.cells.iter().any(|&c| c < DEAD)
    }
    fn accept(&self, s: &Band, b: u8) -> Band {
        // new cell k is query prefix i = j + k - 1: its substitution/match predecessor
        // (i - 1, j) is old cell k, its insertion predecessor (i, j) old cell k + 1,
        // its deletion predecessor (i - 1, j + 1) new cell k - 1
        let mut cells = [DEAD; BAND];
        for k in 0..BAND {
            let Some(i) = (s.j + k).checked_sub(1) else {
                continue;
            };
            if i > self.q.len() {
                break;
            }
            let inserted = s.cells.get(k + 1).map_or(DEAD, |c| c.saturating_add(1));
            let aligned = if i == 0 {
                DEAD
            } else {
                let sub = s.cells[k].saturating_add((self.q[i - 1] != b) as u8);
                let del = if k > 0 {
                    cells[k - 1].saturating_add(1)
                } else {
                    DEAD
                };
                sub.min(del)
            };
            cells[k] = self.cell(i, aligned, inserted);
        }
        Band { j: s.j + 1, cells }
    }
}

/// The Levenshtein distance of ASCII `q` and `k` when it is at most 2.
pub(crate) fn lev2(q: &[u8], k: &[u8]) -> Option<u8> {
    use fst::Automaton;
    let a = FirstHalfLev::plain(q);
    let mut s = a.start();
    for &b in k {
        s = a.accept(&s, b);
        if !a.can_match(&s) {
            return None;
        }
    }
    a.distance(&s)
}

/// Keys that start with `prefix` and whose remainder `rest` accepts.
pub(crate) struct ExactThenLev<'a> {
    pub prefix: &'a [u8],
    pub rest: FirstHalfLev<'a>,
}

impl fst::Automaton for ExactThenLev<'_> {
    /// (bytes of `prefix` matched, `rest`'s state once all are); `None` = dead.
    type State = Option<(usize, Band)>;
    fn start(&self) -> Self::State {
        Some((0, self.rest.start()))
    }
    fn is_match(&self, s: &Self::State) -> bool {
        matches!(s, Some((n, r)) if *n == self.prefix.len() && self.rest.is_match(r))
    }
    fn can_match(&self, s: &Self::State) -> bool {
        matches!(s, Some((_, r)) if self.rest.can_match(r))
    }
    fn accept(&self, s: &Self::State, b: u8) -> Self::State {
        let (n, r) = (*s)?;
        if n < self.prefix.len() {
            return (self.prefix[n] == b).then_some((n + 1, r));
        }
        Some((n, self.rest.accept(&r, b)))
    }
}

/// Levenshtein automaton builders are costly to make (they precompute the parametric
/// tables) and cheap to use: one per (distance, transpositions), made once.
pub(crate) fn builder(max: u8, transpositions: bool) -> &'static LevenshteinAutomatonBuilder {
    static B: OnceLock<[LevenshteinAutomatonBuilder; 4]> = OnceLock::new();
    let all = B.get_or_init(|| {
        [
            LevenshteinAutomatonBuilder::new(1, false),
            LevenshteinAutomatonBuilder::new(1, true),
            LevenshteinAutomatonBuilder::new(2, false),
            LevenshteinAutomatonBuilder::new(2, true),
        ]
    });
    &all[(max.clamp(1, 2) as usize - 1) * 2 + transpositions as usize]
}

pub(crate) struct Lev<'a>(pub &'a DFA);

impl fst::Automaton for Lev<'_> {
    type State = u32;
    fn start(&self) -> u32 {
        self.0.initial_state()
    }
    fn is_match(&self, s: &u32) -> bool {
        matches!(self.0.distance(*s), Distance::Exact(_))
    }
    fn can_match(&self, s: &u32) -> bool {
        *s != SINK_STATE
    }
    fn accept(&self, s: &u32, b: u8) -> u32 {
        self.0.transition(*s, b)
    }
}
