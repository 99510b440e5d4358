//! Narrowing a filter to candidate offsets with the payload indexes alone.
//!
//! Every sub-expression becomes an [`Est`]: a superset of its matching offsets, flagged exact
//! when it is precisely that set. Intersection and union keep supersets supersets (and exact
//! stays exact when both sides are); `must_not` only takes away exact sets, since taking
//! away a superset could drop matches.

use roaring::RoaringBitmap;

use super::index::{Candidates, PayloadIndex};
use super::model::{Condition, FieldCheck, Filter, MinShould};

/// Past this many steps (`min_count` × conditions), `min_should` is narrowed to the union of
/// its conditions instead of counted exactly.
const MAX_MIN_SHOULD_STEPS: usize = 4096;

#[derive(Clone, Debug)]
enum Set {
    /// Every offset below `len`, kept symbolic so unknowns cost nothing.
    All,
    Some(RoaringBitmap),
}

#[derive(Clone, Debug)]
struct Est {
    set: Set,
    exact: bool,
}

impl Est {
    const UNKNOWN: Est = Est {
        set: Set::All,
        exact: false,
    };
    const EVERYTHING: Est = Est {
        set: Set::All,
        exact: true,
    };

    fn nothing() -> Est {
        Est {
            set: Set::Some(RoaringBitmap::new()),
            exact: true,
        }
    }

    fn is_nothing(&self) -> bool {
        self.exact && matches!(&self.set, Set::Some(b) if b.is_empty())
    }

    fn is_everything(&self) -> bool {
        self.exact && matches!(self.set, Set::All)
    }

    fn and(self, other: Est) -> Est {
        if self.is_nothing() || other.is_nothing() {
            return Est::nothing();
        }
        let exact = self.exact && other.exact;
        let set = match (self.set, other.set) {
            (Set::All, s) | (s, Set::All) => s,
            (Set::Some(a), Set::Some(b)) => Set::Some(a & b),
        };
        Est { set, exact }
    }

    fn or(self, other: Est) -> Est {
        if self.is_everything() || other.is_everything() {
            return Est::EVERYTHING;
        }
        let exact = self.exact && other.exact;
        let set = match (self.set, other.set) {
            (Set::All, _) | (_, Set::All) => Set::All,
            (Set::Some(a), Set::Some(b)) => Set::Some(a | b),
        };
        Est { set, exact }
    }
}

impl PayloadIndex {
    /// A superset of the offsets in `0..len` that can match `filter`, from the indexes alone;
    /// `None` when the indexes cannot narrow it at all. With `exact` set, the offsets are
    /// precisely the matching ones (only indexed conditions were involved), so the caller may
    /// skip evaluating the filter on payloads. A filter the indexes decide matches everything
    /// (the empty filter, say) comes back as all of `0..len`, exact.
    ///
    /// Answerable: `match` `value`/`any` on a keyword field with strings (and `prefix`) or an
    /// integer field with integers, `range` on an integer field, `any: []` anywhere; through `must`,
    /// `should`, `min_should`, nested filters, and `must_not` of exact parts.
    pub fn candidates(&self, filter: &Filter, len: u32) -> Option<Candidates> {
        let est = Planner { index: self, len }.filter(filter);
        let offsets = match est.set {
            Set::All if !est.exact => return None,
            Set::All => full(len),
            Set::Some(mut b) => {
                b.remove_range(len..);
                b
            }
        };
        Some(Candidates {
            offsets,
            exact: est.exact,
        })
    }
}

fn full(len: u32) -> RoaringBitmap {
    let mut b = RoaringBitmap::new();
    b.insert_range(0..len);
    b
}

struct Planner<'a> {
    index: &'a PayloadIndex,
    len: u32,
}

impl Planner<'_> {
    fn filter(&self, f: &Filter) -> Est {
        let mut acc = Est::EVERYTHING;
        for c in &f.must {
            acc = acc.and(self.condition(c));
        }
        if !f.should.is_empty() {
            let any = f
                .should
                .iter()
                .fold(Est::nothing(), |u, c| u.or(self.condition(c)));
            acc = acc.and(any);
        }
        if let Some(ms) = &f.min_should {
            acc = acc.and(self.min_should(ms));
        }
        for c in &f.must_not {
            acc = self.and_not(acc, self.condition(c));
        }
        acc
    }

    /// `acc` without the offsets of `e`; only an exact `e` can be taken away, as removing a
    /// superset could drop matches.
    fn and_not(&self, acc: Est, e: Est) -> Est {
        if !e.exact {
            return acc.and(Est::UNKNOWN);
        }
        let Set::Some(b) = e.set else {
            return Est::nothing();
        };
        let set = match acc.set {
            Set::All => full(self.len) - b,
            Set::Some(a) => a - b,
        };
        Est {
            set: Set::Some(set),
            exact: acc.exact,
        }
    }

    fn condition(&self, c: &Condition) -> Est {
        match c {
            // Nothing is in an empty list, whatever the field holds.
            Condition::Field {
                check: FieldCheck::Any(list),
                ..
            } if list.is_empty() => Est::nothing(),
            Condition::Field { key, check } => self
                .index
                .field(key)
                .and_then(|f| f.lookup(check))
                .map_or(Est::UNKNOWN, |(b, exact)| Est {
                    set: Set::Some(b),
                    exact,
                }),
            Condition::Filter(f) => self.filter(f),
            // Offsets are not ids, and the indexes know nothing of nulls or emptiness.
            // Nested filters look inside array elements, which the indexes do not keep apart.
            Condition::HasId(_)
            | Condition::HasVector(_)
            | Condition::Slice { .. }
            | Condition::IsEmpty(_)
            | Condition::IsNull(_)
            | Condition::Nested(_) => Est::UNKNOWN,
        }
    }

    fn min_should(&self, ms: &MinShould) -> Est {
        let (m, n) = (ms.min_count, ms.conditions.len());
        if m == 0 {
            return Est::EVERYTHING;
        }
        if m > n {
            return Est::nothing();
        }
        let parts = ms.conditions.iter().map(|c| self.condition(c));
        if m > 1 && m.saturating_mul(n) <= MAX_MIN_SHOULD_STEPS {
            // at_least[k]: offsets matching at least k of the conditions seen so far. Built
            // from unions and intersections only, so it is a superset (or exact) like its parts.
            let mut at_least = vec![Est::nothing(); m + 1];
            at_least[0] = Est::EVERYTHING;
            for part in parts {
                for k in (1..=m).rev() {
                    let grown = at_least[k - 1].clone().and(part.clone());
                    at_least[k] = std::mem::replace(&mut at_least[k], Est::nothing()).or(grown);
                }
            }
            return at_least.swap_remove(m);
        }
        // At least one must match, so their union holds every match; with m > 1 it holds more.
        let any = parts.fold(Est::nothing(), |u, e| u.or(e));
        Est {
            exact: any.exact && m == 1,
            ..any
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use serde_json::{json, Value};

    use super::*;
    use crate::filter::PayloadIndexKind;
    use crate::point::{Payload, PointId};

    fn payload(v: Value) -> Payload {
        v.as_object().unwrap().clone()
    }

    fn index_of(payloads: &[Payload]) -> PayloadIndex {
        let mut idx = PayloadIndex::new();
        idx.add_field("pos", PayloadIndexKind::Keyword);
        idx.add_field("lexname", PayloadIndexKind::Keyword);
        idx.add_field("chars", PayloadIndexKind::Integer);
        for (i, p) in payloads.iter().enumerate() {
            idx.insert(i as u32, p);
        }
        idx
    }

    fn brute(f: &Filter, payloads: &[Payload]) -> RoaringBitmap {
        let ids = payloads.iter().enumerate();
        ids.filter(|(i, p)| f.matches(PointId::Num(*i as u64), Some(p)))
            .map(|(i, _)| i as u32)
            .collect()
    }

    fn cands(idx: &PayloadIndex, f: Value, len: u32) -> Option<(Vec<u32>, bool)> {
        let f = Filter::from_json(&f).unwrap();
        idx.candidates(&f, len)
            .map(|c| (c.offsets.iter().collect(), c.exact))
    }

    #[test]
    fn planner_shapes() {
        let ps: Vec<Payload> = [
            json!({"pos": "n", "chars": 3, "lexname": "noun.animal"}),
            json!({"pos": "v", "chars": 10}),
            json!({"pos": ["n", "a"], "chars": [2.5, 40]}),
            json!({"flag": true}),
        ]
        .into_iter()
        .map(payload)
        .collect();
        let idx = index_of(&ps);
        let pos = |v: &str| json!({"key": "pos", "match": {"value": v}});
        assert_eq!(
            cands(&idx, json!({"must": pos("n")}), 4),
            Some((vec![0, 2], true))
        );
        // Offsets past `len` are cut off.
        assert_eq!(
            cands(&idx, json!({"must": pos("n")}), 1),
            Some((vec![0], true))
        );
        assert_eq!(cands(&idx, json!({}), 4), Some((vec![0, 1, 2, 3], true)));
        assert_eq!(
            cands(
                &idx,
                json!({"must": {"key": "flag", "match": {"value": true}}}),
                4
            ),
            None
        );
        assert_eq!(cands(&idx, json!({"must": {"has_id": [1]}}), 4), None);
        // An unindexed condition beside an indexed one: narrowed, not exact.
        assert_eq!(
            cands(&idx, json!({"must": [pos("v"), {"has_id": [0]}]}), 4),
            Some((vec![1], false))
        );
        assert_eq!(
            cands(&idx, json!({"should": [pos("v"), pos("a")]}), 4),
            Some((vec![1, 2], true))
        );
        assert_eq!(
            cands(&idx, json!({"should": [pos("v"), {"has_id": [0]}]}), 4),
            None
        );
        assert_eq!(
            cands(&idx, json!({"must_not": pos("n")}), 4),
            Some((vec![1, 3], true))
        );
        assert_eq!(cands(&idx, json!({"must_not": {"has_id": [0]}}), 4), None);
        assert_eq!(
            cands(
                &idx,
                json!({"must": pos("n"), "must_not": {"has_id": [0]}}),
                4
            ),
            Some((vec![0, 2], false))
        );
        // Float values in an integer-indexed field keep a range inexact.
        let chars = |r: Value| json!({"must": {"key": "chars", "range": r}});
        assert_eq!(
            cands(&idx, chars(json!({"gte": 5})), 4),
            Some((vec![1, 2], true))
        );
        assert_eq!(
            cands(&idx, chars(json!({"lt": 3})), 4),
            Some((vec![2], false))
        );
        assert_eq!(
            cands(&idx, chars(json!({"gt": 2.4, "lt": 3})), 4),
            Some((vec![2], false))
        );
        assert_eq!(
            cands(
                &idx,
                json!({"must": {"key": "chars", "match": {"any": [3, 10]}}}),
                4
            ),
            Some((vec![0, 1], true))
        );
        // A keyword match on the integer field: the index cannot say.
        assert_eq!(
            cands(
                &idx,
                json!({"must": {"key": "chars", "match": {"value": "3"}}}),
                4
            ),
            None
        );
        assert_eq!(
            cands(
                &idx,
                json!({"must": {"key": "flag", "match": {"any": []}}}),
                4
            ),
            Some((vec![], true))
        );
        // Nothing AND unknown is still exactly nothing; everything OR unknown is everything.
        assert_eq!(
            cands(&idx, json!({"must": [pos("x"), {"has_id": [1]}]}), 4),
            Some((vec![], true))
        );
        assert_eq!(
            cands(&idx, json!({"should": [{}, {"has_id": [1]}]}), 4),
            Some((vec![0, 1, 2, 3], true))
        );
        let ms = |n: usize| json!({"min_should": {"conditions": [pos("n"), pos("a"), {"key": "chars", "range": {"gte": 10}}], "min_count": n}});
        assert_eq!(cands(&idx, ms(0), 4), Some((vec![0, 1, 2, 3], true)));
        assert_eq!(cands(&idx, ms(1), 4), Some((vec![0, 1, 2], true)));
        assert_eq!(cands(&idx, ms(2), 4), Some((vec![2], true)));
        assert_eq!(cands(&idx, ms(3), 4), Some((vec![2], true)));
        assert_eq!(cands(&idx, ms(4), 4), Some((vec![], true)));
    }

    #[test]
    fn ranges_agree_with_evaluation_beyond_2_pow_53() {
        let big = (1i64 << 53) + 1;
        let ps = vec![
            payload(json!({"chars": big})),
            payload(json!({"chars": i64::MAX})),
            payload(json!({"chars": i64::MIN})),
        ];
        let idx = index_of(&ps);
        for r in [
            json!({"lte": 9007199254740992.0}),
            json!({"gt": 9007199254740992.0}),
            json!({"gte": 9.223372036854776e18}),
            json!({"lt": -9.223372036854776e18}),
            json!({"lte": -9.223372036854776e18}),
        ] {
            let f = Filter::from_json(&json!({"must": {"key": "chars", "range": r}})).unwrap();
            let c = idx.candidates(&f, 3).unwrap();
            assert!(c.exact);
            assert_eq!(c.offsets, brute(&f, &ps), "{r}");
        }
    }

    // Random payloads and filters from a small vocabulary: candidates hold every match, and
    // are exactly the matches when they say so.
    #[test]
    fn candidates_cover_brute_force_matches() {
        const LEX: [&str; 10] = [
            "noun.animal",
            "noun.plant",
            "noun.act",
            "verb.motion",
            "verb.change",
            "adj.all",
            "adj.pert",
            "adv.all",
            "noun.food",
            "noun.person",
        ];
        const POS: [&str; 4] = ["n", "v", "a", "r"];
        let mut rng = StdRng::seed_from_u64(0x5eed_f11e);

        fn pick<T: Copy>(rng: &mut StdRng, xs: &[T]) -> T {
            xs[rng.random_range(0..xs.len())]
        }
        fn random_payload(rng: &mut StdRng) -> Payload {
            let mut p = Payload::new();
            match rng.random_range(0..10) {
                0 => {}
                1 => {
                    p.insert("pos".into(), json!([pick(rng, &POS), pick(rng, &POS)]));
                }
                2 => {
                    p.insert("pos".into(), Value::Null);
                }
                3 => {
                    p.insert("pos".into(), json!(7));
                }
                _ => {
                    p.insert("pos".into(), json!(pick(rng, &POS)));
                }
            }
            if rng.random_bool(0.8) {
                let lex = pick(rng, &LEX);
                p.insert("lexname".into(), json!(lex));
            }
            match rng.random_range(0..10) {
                0 => {}
                1 => {
                    p.insert("chars".into(), json!(rng.random_range(1..40) as f64 + 0.5));
                }
                2 => {
                    let (a, b) = (rng.random_range(1..40), rng.random_range(1..40));
                    p.insert("chars".into(), json!([a, b]));
                }
                3 => {
                    p.insert("chars".into(), json!("12"));
                }
                _ => {
                    p.insert("chars".into(), json!(rng.random_range(1..40)));
                }
            }
            if rng.random_bool(0.7) {
                p.insert("flag".into(), json!(rng.random_bool(0.5)));
            }
            p
        }
        fn random_condition(rng: &mut StdRng, depth: usize) -> Value {
            let lexes = |rng: &mut StdRng| {
                let n = rng.random_range(0..3);
                (0..n).map(|_| pick(rng, &LEX)).collect::<Vec<_>>()
            };
            let bound = |rng: &mut StdRng| -> Value {
                if rng.random_bool(0.5) {
                    json!(rng.random_range(0..42))
                } else {
                    json!(rng.random_range(0..84) as f64 / 2.0)
                }
            };
            match rng.random_range(0..if depth > 0 { 14 } else { 11 }) {
                0 => json!({"key": "pos", "match": {"value": pick(rng, &POS)}}),
                1 => json!({"key": "pos", "match": {"any": [pick(rng, &POS), pick(rng, &POS)]}}),
                2 => json!({"key": "lexname", "match": {"value": pick(rng, &LEX)}}),
                3 => json!({"key": "lexname", "match": {"any": lexes(rng)}}),
                4 => json!({"key": "lexname", "match": {"except": lexes(rng)}}),
                5 => json!({"key": "chars", "match": {"value": rng.random_range(1..40)}}),
                6 => {
                    let mut r = serde_json::Map::new();
                    for b in ["gt", "gte", "lt", "lte"] {
                        if rng.random_bool(0.4) {
                            r.insert(b.into(), bound(rng));
                        }
                    }
                    json!({"key": "chars", "range": r})
                }
                7 => json!({"key": "flag", "match": {"value": rng.random_bool(0.5)}}),
                8 => match rng.random_range(0..3) {
                    0 => json!({"is_empty": {"key": "pos"}}),
                    1 => json!({"is_null": {"key": "pos"}}),
                    _ => json!({"is_empty": {"key": "chars"}}),
                },
                9 => json!({"has_id": [rng.random_range(0..60), rng.random_range(0..60)]}),
                10 => {
                    json!({"key": "chars", "match": {"any": [rng.random_range(1..40), rng.random_range(1..40)]}})
                }
                _ => random_filter(rng, depth - 1),
            }
        }
        fn random_filter(rng: &mut StdRng, depth: usize) -> Value {
            let mut f = serde_json::Map::new();
            for clause in ["must", "should", "must_not"] {
                if rng.random_bool(0.5) {
                    let n = rng.random_range(0..4);
                    let cs: Vec<Value> = (0..n).map(|_| random_condition(rng, depth)).collect();
                    f.insert(clause.into(), Value::Array(cs));
                }
            }
            if rng.random_bool(0.2) {
                let n = rng.random_range(0..4);
                let cs: Vec<Value> = (0..n).map(|_| random_condition(rng, depth)).collect();
                let min_count = rng.random_range(0..4);
                f.insert(
                    "min_should".into(),
                    json!({"conditions": cs, "min_count": min_count}),
                );
            }
            Value::Object(f)
        }

        let (mut exact, mut narrowed, mut checked) = (0, 0, 0);
        for _round in 0..25 {
            let n = rng.random_range(1..60);
            let mut payloads: Vec<Payload> = (0..n).map(|_| random_payload(&mut rng)).collect();
            let mut idx = index_of(&payloads);
            // Rewrite some points so removal is exercised too.
            for _ in 0..n / 3 {
                let i = rng.random_range(0..n);
                idx.remove(i as u32, &payloads[i]);
                payloads[i] = random_payload(&mut rng);
                idx.insert(i as u32, &payloads[i]);
            }
            for _ in 0..80 {
                let fj = random_filter(&mut rng, 2);
                let f = Filter::from_json(&fj).unwrap();
                let truth = brute(&f, &payloads);
                // `len` below the point count checks the cut-off.
                let len = if rng.random_bool(0.2) {
                    rng.random_range(0..=n) as u32
                } else {
                    n as u32
                };
                let mut want = truth.clone();
                want.remove_range(len..);
                checked += 1;
                let Some(c) = idx.candidates(&f, len) else {
                    continue;
                };
                narrowed += 1;
                assert!(c.offsets.iter().all(|o| o < len), "{fj}");
                assert!(
                    want.is_subset(&c.offsets),
                    "{fj}: {want:?} not in {:?}",
                    c.offsets
                );
                if c.exact {
                    exact += 1;
                    assert_eq!(c.offsets, want, "{fj} said exact");
                }
            }
        }
        // The test only means something if the interesting paths are taken often.
        assert_eq!(checked, 2000);
        assert!(narrowed > 800, "narrowed {narrowed}");
        assert!(exact > 300, "exact {exact}");
    }
}
