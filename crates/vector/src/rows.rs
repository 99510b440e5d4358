/// A read-only view of row-major vectors.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    data: &'a [f32],
    dim: usize,
}

impl<'a> Rows<'a> {
    /// `data.len()` must be a multiple of `dim` (see `check_vectors`).
    pub fn new(data: &'a [f32], dim: usize) -> Self {
        assert!(
            dim > 0 && data.len().is_multiple_of(dim),
            "rows of {dim} do not tile {} values",
            data.len()
        );
        Self { data, dim }
    }

    #[inline]
    pub fn get(&self, i: u32) -> &'a [f32] {
        let start = i as usize * self.dim;
        &self.data[start..start + self.dim]
    }

    pub fn len(&self) -> usize {
        self.data.len() / self.dim
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn data(&self) -> &'a [f32] {
        self.data
    }
}
