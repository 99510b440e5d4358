//! Filters put together: a query's filter applies to its prefetches as well.

use super::model::{Condition, Filter};

impl Filter {
    /// A filter matching what both `self` and `other` match.
    pub fn and(&self, other: &Filter) -> Filter {
        if self.is_empty() {
            return other.clone();
        }
        if other.is_empty() {
            return self.clone();
        }
        Filter {
            must: vec![
                Condition::Filter(Box::new(self.clone())),
                Condition::Filter(Box::new(other.clone())),
            ],
            ..Filter::default()
        }
    }
}
