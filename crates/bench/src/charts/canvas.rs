//! plotters' bitmap backend with our own text drawing: plotters 0.3.7's ab_glyph text puts
//! each glyph at the pen position without its side bearing, so letters bunch up and gap
//! ("mil vus"). Here glyphs are laid out and rasterised by ab_glyph with their bearings,
//! kerning and sub-pixel positions; everything else is the bitmap backend's.

use ab_glyph::{point, Font, FontRef, Glyph, PxScale, ScaleFont};
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};

use super::font::font;

type Error = DrawingErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>;

pub struct Canvas<'a> {
    bitmap: BitMapBackend<'a>,
}

impl<'a> Canvas<'a> {
    /// `rgb` holds `w * h` pixels, 3 bytes each.
    pub fn new(rgb: &'a mut [u8], (w, h): (u32, u32)) -> Self {
        Self {
            bitmap: BitMapBackend::with_buffer(rgb, (w, h)),
        }
    }
}

/// The font, the glyphs of `text` on a baseline at y = 0 starting at x = 0, and the text's width.
fn layout(text: &str, size: f32) -> Result<(&'static FontRef<'static>, Vec<Glyph>, f32), Error> {
    let font = font().ok_or_else(|| {
        DrawingErrorKind::FontError(Box::new(std::io::Error::other(
            "the embedded chart font does not parse",
        )))
    })?;
    let scaled = font.as_scaled(PxScale::from(size));
    let mut caret = 0.0;
    let mut prev = None;
    let mut glyphs = Vec::with_capacity(text.len());
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = prev {
            caret += scaled.kern(p, id);
        }
        glyphs.push(id.with_scale_and_position(size, point(caret, 0.0)));
        caret += scaled.h_advance(id);
        prev = Some(id);
    }
    Ok((font, glyphs, caret))
}

/// Ascent and descent (negative) at `size`.
fn metrics(size: f32) -> (f32, f32) {
    font().map_or((size * 0.8, -size * 0.2), |f| {
        let s = f.as_scaled(PxScale::from(size));
        (s.ascent(), s.descent())
    })
}

impl DrawingBackend for Canvas<'_> {
    type ErrorType = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.bitmap.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), Error> {
        self.bitmap.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), Error> {
        self.bitmap.present()
    }

    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), Error> {
        self.bitmap.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), Error> {
        self.bitmap.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), Error> {
        self.bitmap.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), Error> {
        self.bitmap.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), Error> {
        self.bitmap.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), Error> {
        self.bitmap.fill_polygon(vert, style)
    }

    fn blit_bitmap(&mut self, pos: BackendCoord, dim: (u32, u32), src: &[u8]) -> Result<(), Error> {
        self.bitmap.blit_bitmap(pos, dim, src)
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), Error> {
        let size = style.size() as f32;
        let (_, _, width) = layout(text, size)?;
        let (ascent, descent) = metrics(size);
        Ok((width.ceil() as u32, (ascent - descent).ceil() as u32))
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), Error> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let size = style.size() as f32;
        let (font, glyphs, width) = layout(text, size)?;
        let (ascent, descent) = metrics(size);
        let height = ascent - descent;
        let dx = match style.anchor().h_pos {
            HPos::Left => 0.0,
            HPos::Center => -width / 2.0,
            HPos::Right => -width,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0.0,
            VPos::Center => -height / 2.0,
            VPos::Bottom => -height,
        };
        // Rotation (the y axis' label) turns the laid-out text about the anchor.
        let turn = style.transform();
        let (w, h) = self.get_size();
        for mut glyph in glyphs {
            glyph.position = point(glyph.position.x + dx, ascent + dy);
            let Some(outline) = font.outline_glyph(glyph) else {
                continue;
            };
            let min = outline.px_bounds().min;
            let mut result = Ok(());
            outline.draw(|x, y, coverage| {
                if result.is_err() || coverage <= 0.0 {
                    return;
                }
                let (x, y) = turn.transform(min.x as i32 + x as i32, min.y as i32 + y as i32);
                let (x, y) = (pos.0 + x, pos.1 + y);
                if x >= 0 && y >= 0 && (x as u32) < w && (y as u32) < h {
                    let ink = BackendColor {
                        alpha: color.alpha * f64::from(coverage.min(1.0)),
                        rgb: color.rgb,
                    };
                    result = self.bitmap.draw_pixel((x, y), ink);
                }
            });
            result?;
        }
        Ok(())
    }
}
