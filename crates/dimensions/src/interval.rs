/// A numeric interval with optional open sides (`[a,b]`, `(a,]`, `[?,b)` …).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub lo: Option<f64>,
    pub lo_incl: bool,
    pub hi: Option<f64>,
    pub hi_incl: bool,
}

impl Interval {
    pub const ALL: Interval = Interval {
        lo: None,
        lo_incl: true,
        hi: None,
        hi_incl: true,
    };

    pub fn point(v: f64) -> Self {
        Interval {
            lo: Some(v),
            lo_incl: true,
            hi: Some(v),
            hi_incl: true,
        }
    }

    /// Is the string an interval (starts with `[` or `(`)?
    pub fn looks_like(s: &str) -> bool {
        matches!(s.trim_start().chars().next(), Some('[') | Some('('))
    }

    /// Parses `[a,b]` with `[]()` and sides empty or `?`; `bound` parses one side.
    pub fn parse_with(
        s: &str,
        mut bound: impl FnMut(&str) -> Option<f64>,
    ) -> Result<Interval, String> {
        let t = s.trim();
        let bad = || format!("{s:?} is not an interval");
        let lo_incl = match t.chars().next() {
            Some('[') => true,
            Some('(') => false,
            _ => return Err(bad()),
        };
        let hi_incl = match t.chars().last() {
            Some(']') => true,
            Some(')') => false,
            _ => return Err(bad()),
        };
        if t.len() < 2 {
            return Err(bad());
        }
        let inner = &t[1..t.len() - 1];
        let mut parts = inner.splitn(2, ',');
        let a = parts.next().ok_or_else(bad)?.trim();
        let b = parts.next().ok_or_else(bad)?.trim();
        let side =
            |x: &str, bound: &mut dyn FnMut(&str) -> Option<f64>| -> Result<Option<f64>, String> {
                if x.is_empty() || x == "?" {
                    Ok(None)
                } else {
                    bound(x).map(Some).ok_or_else(bad)
                }
            };
        let lo = side(a, &mut bound)?;
        let hi = side(b, &mut bound)?;
        Ok(Interval {
            lo,
            lo_incl,
            hi,
            hi_incl,
        })
    }

    pub fn parse(s: &str) -> Result<Interval, String> {
        Self::parse_with(s, |x| x.parse::<f64>().ok().filter(|v| v.is_finite()))
    }

    pub fn contains(&self, v: f64) -> bool {
        let lo_ok = match self.lo {
            None => true,
            Some(lo) => v > lo || (self.lo_incl && v == lo),
        };
        let hi_ok = match self.hi {
            None => true,
            Some(hi) => v < hi || (self.hi_incl && v == hi),
        };
        lo_ok && hi_ok
    }

    /// Distance from `v` to the closure of the interval (0 inside or on an end).
    pub fn distance(&self, v: f64) -> f64 {
        if let Some(lo) = self.lo {
            if v < lo {
                return lo - v;
            }
        }
        if let Some(hi) = self.hi {
            if v > hi {
                return v - hi;
            }
        }
        0.0
    }

    /// True when no value can be inside.
    pub fn is_empty(&self) -> bool {
        match (self.lo, self.hi) {
            (Some(lo), Some(hi)) => lo > hi || (lo == hi && !(self.lo_incl && self.hi_incl)),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_forms() {
        let i = Interval::parse("[1,2)").unwrap();
        assert!(i.contains(1.0) && i.contains(1.5) && !i.contains(2.0));
        let i = Interval::parse("[4,]").unwrap();
        assert!(i.contains(1e9) && !i.contains(3.9));
        let i = Interval::parse("(?,3]").unwrap();
        assert!(i.contains(-1e9) && i.contains(3.0));
        assert!(Interval::parse("[1,x]").is_err());
        assert!(Interval::parse("1,2").is_err());
        assert!(Interval::parse("[").is_err());
        assert_eq!(Interval::parse("[2,4]").unwrap().distance(7.0), 3.0);
    }
}
