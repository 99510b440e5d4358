//! A sealed segment's payloads by offset: empty ones (every point of a collection without
//! payloads) take 8 bytes, not the 24 of an empty JSON object, and none at all when the
//! whole segment has none.

use std::sync::LazyLock;

use crate::Payload;

static EMPTY: LazyLock<Payload> = LazyLock::new(Payload::new);

#[derive(Debug)]
pub(crate) enum PayloadColumn {
    /// This many points, none with a payload.
    Empty(usize),
    Some(Vec<Option<Box<Payload>>>),
}

impl Default for PayloadColumn {
    fn default() -> Self {
        PayloadColumn::Empty(0)
    }
}

impl PayloadColumn {
    #[cfg(test)]
    fn from_payloads(payloads: Vec<Payload>) -> Self {
        let mut column = Self::default();
        for p in payloads {
            column.push(p);
        }
        column.shrink_to_fit();
        column
    }

    pub fn push(&mut self, p: Payload) {
        match self {
            PayloadColumn::Empty(n) if p.is_empty() => *n += 1,
            PayloadColumn::Empty(n) => {
                let mut v: Vec<Option<Box<Payload>>> = Vec::with_capacity(*n + 1);
                v.resize_with(*n, || None);
                v.push(Some(Box::new(p)));
                *self = PayloadColumn::Some(v);
            }
            PayloadColumn::Some(v) => v.push((!p.is_empty()).then(|| Box::new(p))),
        }
    }

    pub fn shrink_to_fit(&mut self) {
        if let PayloadColumn::Some(v) = self {
            v.shrink_to_fit();
        }
    }

    pub fn len(&self) -> usize {
        match self {
            PayloadColumn::Empty(n) => *n,
            PayloadColumn::Some(v) => v.len(),
        }
    }

    pub fn get(&self, offset: usize) -> &Payload {
        match self {
            PayloadColumn::Empty(_) => &EMPTY,
            PayloadColumn::Some(v) => v[offset].as_deref().unwrap_or(&EMPTY),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Payload> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Bytes it takes, roughly (a payload's keys and values at 48 bytes each).
    pub fn bytes(&self) -> usize {
        match self {
            PayloadColumn::Empty(_) => 0,
            PayloadColumn::Some(v) => {
                v.len() * 8 + v.iter().flatten().map(|p| 64 + p.len() * 48).sum::<usize>()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_payloads_take_no_object_and_the_others_keep_their_offsets() {
        let none = PayloadColumn::from_payloads(vec![Payload::new(); 3]);
        assert!(matches!(none, PayloadColumn::Empty(3)));
        assert_eq!((none.len(), none.bytes()), (3, 0));
        assert!(none.get(2).is_empty());
        let p = json!({"a": 1}).as_object().unwrap().clone();
        let some = PayloadColumn::from_payloads(vec![Payload::new(), p.clone(), Payload::new()]);
        assert_eq!(some.len(), 3);
        let got: Vec<&Payload> = some.iter().collect();
        assert_eq!(got, vec![&Payload::new(), &p, &Payload::new()]);
    }
}
