//! The one font charts are drawn with, embedded so a chart needs no system font.

use std::sync::OnceLock;

use ab_glyph::FontRef;

/// The family name text styles carry; `Canvas` draws every family with the embedded font.
pub const FAMILY: &str = "sans-serif";

/// DejaVu Sans cut down to Latin-1 (see fonts/README.md for where it comes from).
static FONT: &[u8] = include_bytes!("../../fonts/DejaVuSans-subset.ttf");

/// The parsed font, or None should the embedded bytes not parse.
pub fn font() -> Option<&'static FontRef<'static>> {
    static PARSED: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    PARSED
        .get_or_init(|| FontRef::try_from_slice(FONT).ok())
        .as_ref()
}
