//! Payload indexes of one segment: keyword and integer value → offsets bitmaps per field.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use roaring::RoaringBitmap;
use serde_json::Value;

use super::model::{FieldCheck, MatchValue, Range, ValueList};
use super::path::KeyPath;
use super::text::{TextIndexParams, TextMatch};
use super::FilterError;
use crate::point::Payload;

/// What a field's index holds.
#[derive(Clone, Debug, PartialEq)]
pub enum PayloadIndexKind {
    /// String values; answers `match` `value`/`any`/`prefix` with strings.
    Keyword,
    /// Integer values; answers `match` `value`/`any` with integers, and `range`.
    Integer,
    /// The tokens of string values (`filter/text.rs`): gives `match` `text`, `text_any` and
    /// `phrase` their token meaning, and answers them with candidates.
    Text(Arc<TextIndexParams>),
    /// A field declared with one of Qdrant's other schema kinds (float, bool, datetime,
    /// uuid, geo): recorded in the collection's schema and shown as declared, while
    /// filters on it are answered from the payloads (the same results; these kinds get
    /// index structures of their own later).
    Declared(DeclaredKind),
}

/// Qdrant's payload schema kinds that are recorded without an index structure yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeclaredKind {
    Float,
    Bool,
    Datetime,
    Uuid,
    Geo,
}

const DECLARED: [(DeclaredKind, &str); 5] = [
    (DeclaredKind::Float, "float"),
    (DeclaredKind::Bool, "bool"),
    (DeclaredKind::Datetime, "datetime"),
    (DeclaredKind::Uuid, "uuid"),
    (DeclaredKind::Geo, "geo"),
];

impl PayloadIndexKind {
    /// Reads Qdrant's schema name: `"keyword"`, `"integer"`, `"float"`, `"bool"`,
    /// `"datetime"`, `"uuid"`, `"text"` or `"geo"`.
    pub fn from_name(name: &str) -> Result<Self, FilterError> {
        Self::from_schema(name, None)
    }

    /// [`PayloadIndexKind::from_name`] with the index's options (Qdrant's `field_schema`
    /// object; only a text index reads them).
    pub fn from_schema(name: &str, params: Option<&Value>) -> Result<Self, FilterError> {
        match name {
            "keyword" => Ok(PayloadIndexKind::Keyword),
            "integer" => Ok(PayloadIndexKind::Integer),
            "text" => Ok(PayloadIndexKind::Text(Arc::new(
                TextIndexParams::from_json(params)?,
            ))),
            other => DECLARED
                .iter()
                .find(|(_, n)| *n == other)
                .map(|(k, _)| PayloadIndexKind::Declared(*k))
                .ok_or_else(|| {
                    FilterError(format!(
                        "payload index kind {other:?} is not one of keyword, integer, float, \
                         bool, datetime, uuid, text, geo"
                    ))
                }),
        }
    }

    /// The schema name [`PayloadIndexKind::from_name`] reads.
    pub fn name(&self) -> &'static str {
        match self {
            PayloadIndexKind::Keyword => "keyword",
            PayloadIndexKind::Integer => "integer",
            PayloadIndexKind::Text(_) => "text",
            PayloadIndexKind::Declared(kind) => DECLARED
                .iter()
                .find(|(k, _)| k == kind)
                .map(|(_, n)| *n)
                .expect("every declared kind has a name"),
        }
    }
}

/// What [`PayloadIndex::candidates`] found: a superset of the offsets that match the filter,
/// and whether it is exactly that set.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidates {
    /// Offsets (all below the `len` asked for) that may match.
    pub offsets: RoaringBitmap,
    /// Every offset in `offsets` matches and no other does: evaluating the filter on the
    /// payloads would change nothing (deleted points are still the caller's business).
    pub exact: bool,
}

/// The payload indexes of one segment, over point offsets. Points are indexed by
/// [`PayloadIndex::insert`]; a point never inserted counts as one whose payload lacks every
/// indexed field.
#[derive(Clone, Debug, Default)]
pub struct PayloadIndex {
    pub(crate) fields: BTreeMap<String, FieldIndex>,
}

#[derive(Clone, Debug)]
pub(crate) struct FieldIndex {
    /// `None` when the key does not parse: no filter can name it, so it indexes nothing.
    path: Option<KeyPath>,
    values: FieldValues,
}

#[derive(Clone, Debug)]
enum FieldValues {
    Keyword(HashMap<String, RoaringBitmap>),
    Integer {
        by_value: BTreeMap<i64, RoaringBitmap>,
        /// Points with a number that is not an `i64` (a float, a huge unsigned) here. Integer
        /// matches never match those, but a range may, so ranges must take them in.
        other_numbers: RoaringBitmap,
    },
    /// Each token → the points whose value has it.
    Text {
        params: Arc<TextIndexParams>,
        tokens: HashMap<String, RoaringBitmap>,
    },
    /// No structure: every filter on it reads the payloads.
    Declared(DeclaredKind),
}

impl PayloadIndex {
    /// No indexed fields.
    pub fn new() -> Self {
        Self::default()
    }

    /// Refuses a key no filter could name, so a request to index it can be refused up front.
    pub fn check_key(key: &str) -> Result<(), FilterError> {
        KeyPath::parse(key).map(|_| ())
    }

    /// Starts an empty index for `key` (replacing any index it had); the caller then inserts
    /// the segment's points.
    pub fn add_field(&mut self, key: &str, kind: PayloadIndexKind) {
        let values = match kind {
            PayloadIndexKind::Keyword => FieldValues::Keyword(HashMap::new()),
            PayloadIndexKind::Integer => FieldValues::Integer {
                by_value: BTreeMap::new(),
                other_numbers: RoaringBitmap::new(),
            },
            PayloadIndexKind::Text(params) => FieldValues::Text {
                params,
                tokens: HashMap::new(),
            },
            PayloadIndexKind::Declared(kind) => FieldValues::Declared(kind),
        };
        let path = KeyPath::parse(key).ok();
        self.fields
            .insert(key.to_string(), FieldIndex { path, values });
    }

    /// The offsets `key`'s index holds a value for (Qdrant's "points" of an index); `None`
    /// for a kind recorded without a structure.
    pub fn indexed_offsets(&self, key: &str) -> Option<RoaringBitmap> {
        Some(match &self.fields.get(key)?.values {
            FieldValues::Keyword(map) => union(map.values()),
            FieldValues::Integer {
                by_value,
                other_numbers,
            } => union(by_value.values().chain([other_numbers])),
            FieldValues::Text { tokens, .. } => union(tokens.values()),
            FieldValues::Declared(_) => return None,
        })
    }

    /// Moves `key`'s index out of `built` (an index made aside for it) into this one.
    pub fn take_field_from(&mut self, key: &str, mut built: PayloadIndex) {
        if let Some(field) = built.fields.remove(key) {
            self.fields.insert(key.to_string(), field);
        }
    }

    pub fn remove_field(&mut self, key: &str) {
        self.fields.remove(key);
    }

    /// The indexed fields and their kinds, in key order.
    pub fn fields(&self) -> Vec<(String, PayloadIndexKind)> {
        self.fields
            .iter()
            .map(|(k, f)| (k.clone(), f.kind()))
            .collect()
    }

    /// Indexes the point at `offset` under every indexed field its payload has a value for
    /// (each element of an array value).
    pub fn insert(&mut self, offset: u32, payload: &Payload) {
        for field in self.fields.values_mut() {
            field.update(offset, payload, true);
        }
    }

    /// Undoes [`PayloadIndex::insert`] of the same payload at `offset`.
    pub fn remove(&mut self, offset: u32, payload: &Payload) {
        for field in self.fields.values_mut() {
            field.update(offset, payload, false);
        }
    }

    /// Approximate heap bytes held by the indexes.
    pub fn dram_bytes(&self) -> usize {
        const ENTRY: usize = 48;
        self.fields
            .iter()
            .map(|(key, f)| {
                ENTRY
                    + key.len()
                    + match &f.values {
                        FieldValues::Keyword(map) => map
                            .iter()
                            .map(|(k, b)| ENTRY + k.len() + b.serialized_size())
                            .sum::<usize>(),
                        FieldValues::Integer {
                            by_value,
                            other_numbers,
                        } => {
                            other_numbers.serialized_size()
                                + by_value
                                    .values()
                                    .map(|b| ENTRY + b.serialized_size())
                                    .sum::<usize>()
                        }
                        FieldValues::Text { tokens, .. } => tokens
                            .iter()
                            .map(|(k, b)| ENTRY + k.len() + b.serialized_size())
                            .sum::<usize>(),
                        FieldValues::Declared(_) => 0,
                    }
            })
            .sum()
    }

    /// The index for a filter's key, if there is one.
    pub(crate) fn field(&self, key: &KeyPath) -> Option<&FieldIndex> {
        self.fields
            .get(key.as_str())
            .filter(|f| f.path.as_ref() == Some(key))
    }

    /// The options of the text index of a filter's key, if it has one.
    pub(crate) fn text_params(&self, key: &KeyPath) -> Option<Arc<TextIndexParams>> {
        match &self.field(key)?.values {
            FieldValues::Text { params, .. } => Some(Arc::clone(params)),
            _ => None,
        }
    }
}

impl FieldIndex {
    fn kind(&self) -> PayloadIndexKind {
        match &self.values {
            FieldValues::Keyword(_) => PayloadIndexKind::Keyword,
            FieldValues::Integer { .. } => PayloadIndexKind::Integer,
            FieldValues::Text { params, .. } => PayloadIndexKind::Text(Arc::clone(params)),
            FieldValues::Declared(kind) => PayloadIndexKind::Declared(*kind),
        }
    }

    fn update(&mut self, offset: u32, payload: &Payload, add: bool) {
        let Some(path) = &self.path else { return };
        let values = &mut self.values;
        // The same values a condition looks at: those reached, and one array level inside.
        path.any_value(payload, &mut |v| {
            match v {
                Value::Array(items) => items.iter().for_each(|x| values.update(offset, x, add)),
                _ => values.update(offset, v, add),
            }
            false
        });
    }

    /// The offsets matching `check` on this field, and whether exactly those; `None` when
    /// this index cannot tell.
    pub(crate) fn lookup(&self, check: &FieldCheck) -> Option<(RoaringBitmap, bool)> {
        match (&self.values, check) {
            (FieldValues::Keyword(map), FieldCheck::Value(MatchValue::Keyword(s))) => {
                Some((map.get(s).cloned().unwrap_or_default(), true))
            }
            (FieldValues::Keyword(map), FieldCheck::Any(ValueList::Keywords(set))) => {
                Some((union(set.iter().filter_map(|s| map.get(s))), true))
            }
            // Every distinct value is looked at: fine for the autocompletion this serves.
            (FieldValues::Keyword(map), FieldCheck::Prefix(p)) => Some((
                union(
                    map.iter()
                        .filter(|(k, _)| k.starts_with(p.as_str()))
                        .map(|(_, b)| b),
                ),
                true,
            )),
            (FieldValues::Integer { by_value, .. }, FieldCheck::Value(MatchValue::Integer(i))) => {
                Some((by_value.get(i).cloned().unwrap_or_default(), true))
            }
            (FieldValues::Integer { by_value, .. }, FieldCheck::Any(ValueList::Integers(set))) => {
                Some((union(set.iter().filter_map(|i| by_value.get(i))), true))
            }
            (
                FieldValues::Integer {
                    by_value,
                    other_numbers,
                },
                FieldCheck::Range(r),
            ) => {
                let mut set = match integer_bounds(r) {
                    Some((lo, hi)) => union(by_value.range(lo..=hi).map(|(_, b)| b)),
                    None => RoaringBitmap::new(),
                };
                // A point with a float here may or may not be in range; one also holding an
                // integer in range is in either way.
                let exact = other_numbers.is_subset(&set);
                set |= other_numbers;
                Some((set, exact))
            }
            // Candidates only: the points holding the tokens (a phrase's in order, and an
            // array's in one element, are checked on the payload).
            (FieldValues::Text { params, tokens }, FieldCheck::Text(kind, query)) => {
                if *kind == TextMatch::Phrase && !params.phrase_matching {
                    return None;
                }
                // The tokens evaluation looks for: a phrase's in sequence (words a prefix
                // index would cut are dropped there, as in the stored values).
                let wanted = match kind {
                    TextMatch::Phrase => params.sequence(query),
                    _ => params.query_tokens(query),
                };
                if wanted.is_empty() {
                    return Some((RoaringBitmap::new(), true));
                }
                let mut lists = wanted.iter().map(|t| tokens.get(t));
                Some(match kind {
                    TextMatch::Any => (union(lists.flatten()), false),
                    TextMatch::All | TextMatch::Phrase => {
                        let mut set = lists.next().flatten().cloned().unwrap_or_default();
                        for list in lists {
                            match list {
                                Some(l) => set &= l,
                                None => set.clear(),
                            }
                        }
                        (set, false)
                    }
                })
            }
            _ => None,
        }
    }
}

impl FieldValues {
    fn update(&mut self, offset: u32, v: &Value, add: bool) {
        fn apply<K: Ord>(map: &mut BTreeMap<K, RoaringBitmap>, key: K, offset: u32, add: bool) {
            if add {
                map.entry(key).or_default().insert(offset);
            } else if let Some(b) = map.get_mut(&key) {
                b.remove(offset);
                if b.is_empty() {
                    map.remove(&key);
                }
            }
        }
        /// `apply` for string keys, copying the key only when it is new.
        fn apply_str(map: &mut HashMap<String, RoaringBitmap>, key: &str, offset: u32, add: bool) {
            if add {
                match map.get_mut(key) {
                    Some(b) => {
                        b.insert(offset);
                    }
                    None => {
                        map.insert(key.to_string(), RoaringBitmap::from_iter([offset]));
                    }
                }
            } else if let Some(b) = map.get_mut(key) {
                b.remove(offset);
                if b.is_empty() {
                    map.remove(key);
                }
            }
        }
        match (self, v) {
            (FieldValues::Keyword(map), Value::String(s)) => apply_str(map, s, offset, add),
            (FieldValues::Text { params, tokens }, Value::String(s)) => {
                for token in params.document_tokens(s) {
                    apply_str(tokens, &token, offset, add);
                }
            }
            (
                FieldValues::Integer {
                    by_value,
                    other_numbers,
                },
                Value::Number(n),
            ) => match n.as_i64() {
                Some(i) => apply(by_value, i, offset, add),
                None if add => {
                    other_numbers.insert(offset);
                }
                None => {
                    other_numbers.remove(offset);
                }
            },
            _ => {}
        }
    }
}

fn union<'a>(bitmaps: impl Iterator<Item = &'a RoaringBitmap>) -> RoaringBitmap {
    let mut out = RoaringBitmap::new();
    for b in bitmaps {
        out |= b;
    }
    out
}

/// The integer keys `k` for which `r.contains(k as f64)`, as an inclusive range, or `None`
/// when there are none. Found by bisection on the `f64` comparison itself rather than by
/// rounding the bounds, so the index agrees with evaluation even where `k as f64` rounds
/// (beyond 2^53).
fn integer_bounds(r: &Range) -> Option<(i64, i64)> {
    let lo = least(|k| r.above_lower(k as f64))?;
    let hi = match least(|k| !r.below_upper(k as f64)) {
        Some(i64::MIN) => return None,
        Some(first_out) => first_out - 1,
        None => i64::MAX,
    };
    (lo <= hi).then_some((lo, hi))
}

/// The least `k` with `pred(k)`, for `pred` false then true as `k` grows.
fn least(pred: impl Fn(i64) -> bool) -> Option<i64> {
    if !pred(i64::MAX) {
        return None;
    }
    let (mut lo, mut hi) = (i64::MIN, i64::MAX);
    while lo < hi {
        let mid = ((i128::from(lo) + i128::from(hi)).div_euclid(2)) as i64;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn range(gt: Option<f64>, gte: Option<f64>, lt: Option<f64>, lte: Option<f64>) -> Range {
        Range { gt, gte, lt, lte }
    }

    #[test]
    fn kinds_round_trip_by_name() {
        for name in [
            "keyword", "integer", "float", "bool", "datetime", "uuid", "text", "geo",
        ] {
            assert_eq!(PayloadIndexKind::from_name(name).unwrap().name(), name);
        }
        let e = PayloadIndexKind::from_name("vector").unwrap_err().0;
        assert!(e.contains("\"vector\"") && e.contains("keyword"), "{e}");
        // A declared kind holds no structure: the filter reads the payloads.
        let mut idx = PayloadIndex::new();
        idx.add_field("price", PayloadIndexKind::from_name("float").unwrap());
        idx.insert(0, json!({"price": 1.5}).as_object().unwrap());
        let f = crate::filter::Filter::from_json(
            &json!({"must": [{"key": "price", "range": {"gt": 1.0}}]}),
        )
        .unwrap();
        assert!(idx.candidates(&f, 1).is_none());
        assert!(PayloadIndex::check_key("a[].b").is_ok());
        assert!(PayloadIndex::check_key("a..b").is_err());
    }

    #[test]
    fn keyword_index_answers_prefixes_exactly() {
        let mut idx = PayloadIndex::new();
        idx.add_field("url", PayloadIndexKind::Keyword);
        let payloads = [
            json!({"url": "https://qdrant.tech"}),
            json!({"url": ["http://x", "https://q.io"]}),
            json!({"url": "ftp://qdrant"}),
            json!({"url": 5}),
            json!({}),
        ];
        for (i, p) in payloads.iter().enumerate() {
            idx.insert(i as u32, p.as_object().unwrap());
        }
        for (prefix, want) in [
            ("https://q", vec![0, 1]),
            ("https://qdrant.", vec![0]),
            ("http", vec![0, 1]),
            ("", vec![0, 1, 2]),
            ("x", vec![]),
        ] {
            let f = crate::filter::Filter::from_json(
                &json!({"must": {"key": "url", "match": {"prefix": prefix}}}),
            )
            .unwrap();
            let c = idx.candidates(&f, 5).unwrap();
            assert!(c.exact, "{prefix}");
            assert_eq!(c.offsets.iter().collect::<Vec<_>>(), want, "{prefix}");
            // And evaluation agrees.
            let brute: Vec<u32> = (0..5)
                .filter(|&i| {
                    f.matches(
                        crate::point::PointId::Num(i as u64),
                        Some(payloads[i].as_object().unwrap()),
                    )
                })
                .map(|i| i as u32)
                .collect();
            assert_eq!(brute, want, "{prefix}");
        }
    }

    #[test]
    fn integer_bounds_convert_float_and_inclusive_bounds() {
        let b = |r| integer_bounds(&r);
        assert_eq!(b(range(Some(2.5), None, None, None)), Some((3, i64::MAX)));
        assert_eq!(b(range(Some(2.0), None, None, None)), Some((3, i64::MAX)));
        assert_eq!(b(range(None, Some(2.0), None, None)), Some((2, i64::MAX)));
        assert_eq!(b(range(None, Some(2.5), None, None)), Some((3, i64::MAX)));
        assert_eq!(b(range(None, None, Some(2.5), None)), Some((i64::MIN, 2)));
        assert_eq!(b(range(None, None, Some(2.0), None)), Some((i64::MIN, 1)));
        assert_eq!(b(range(None, None, None, Some(2.0))), Some((i64::MIN, 2)));
        assert_eq!(b(range(None, None, None, Some(-2.5))), Some((i64::MIN, -3)));
        assert_eq!(b(range(Some(-2.5), None, None, None)), Some((-2, i64::MAX)));
        assert_eq!(b(range(Some(2.0), None, Some(3.0), None)), None);
        assert_eq!(
            b(range(Some(2.0), Some(5.0), Some(9.0), Some(7.5))),
            Some((5, 7))
        );
        assert_eq!(b(range(None, None, None, None)), Some((i64::MIN, i64::MAX)));
        assert_eq!(b(range(Some(1e300), None, None, None)), None);
        assert_eq!(b(range(None, None, Some(-1e300), None)), None);
        // Beyond 2^53, k as f64 rounds: every k that rounds to 2^53 compares equal to it.
        let two53 = 9_007_199_254_740_992_f64;
        let (lo, hi) = b(range(None, None, None, Some(two53))).unwrap();
        assert_eq!(lo, i64::MIN);
        assert!((hi as f64) <= two53 && ((hi + 1) as f64) > two53, "{hi}");
    }

    #[test]
    fn insert_and_remove_track_values() {
        let mut idx = PayloadIndex::new();
        idx.add_field("tag", PayloadIndexKind::Keyword);
        idx.add_field("n", PayloadIndexKind::Integer);
        idx.add_field("bad..key", PayloadIndexKind::Integer);
        assert_eq!(
            idx.fields(),
            vec![
                ("bad..key".to_string(), PayloadIndexKind::Integer),
                ("n".to_string(), PayloadIndexKind::Integer),
                ("tag".to_string(), PayloadIndexKind::Keyword),
            ]
        );
        let p0 = json!({"tag": ["a", "b"], "n": [1, 2.5]})
            .as_object()
            .unwrap()
            .clone();
        let p1 = json!({"tag": "a", "n": 7}).as_object().unwrap().clone();
        idx.insert(0, &p0);
        idx.insert(1, &p1);
        let empty_bytes = {
            let mut e = PayloadIndex::new();
            e.add_field("tag", PayloadIndexKind::Keyword);
            e.dram_bytes()
        };
        assert!(idx.dram_bytes() > empty_bytes);
        let tag = idx.fields.get("tag").unwrap();
        let a = FieldCheck::Value(MatchValue::Keyword("a".into()));
        assert_eq!(tag.lookup(&a).unwrap().0, RoaringBitmap::from_iter([0, 1]));
        let n = idx.fields.get("n").unwrap();
        let all = FieldCheck::Range(Range::default());
        assert_eq!(
            n.lookup(&all).unwrap(),
            (RoaringBitmap::from_iter([0, 1]), true)
        );
        let high = FieldCheck::Range(range(Some(2.0), None, None, None));
        // Offset 0 holds 2.5, which the integer keys cannot place: a candidate, not exact.
        assert_eq!(
            n.lookup(&high).unwrap(),
            (RoaringBitmap::from_iter([0, 1]), false)
        );
        assert!(n.lookup(&a).is_none());
        idx.remove(0, &p0);
        let tag = idx.fields.get("tag").unwrap();
        assert_eq!(tag.lookup(&a).unwrap().0, RoaringBitmap::from_iter([1]));
        let FieldValues::Keyword(map) = &tag.values else {
            panic!()
        };
        assert!(!map.contains_key("b"), "empty bitmaps are dropped");
        let n = idx.fields.get("n").unwrap();
        assert_eq!(
            n.lookup(&high).unwrap(),
            (RoaringBitmap::from_iter([1]), true)
        );
        idx.remove_field("n");
        assert_eq!(idx.fields().len(), 2);
        // Re-adding starts empty.
        idx.add_field("tag", PayloadIndexKind::Keyword);
        let tag = idx.fields.get("tag").unwrap();
        assert!(tag.lookup(&a).unwrap().0.is_empty());
    }
}
