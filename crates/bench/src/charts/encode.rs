//! Writing the drawn pixels as a PNG file.

use std::io::BufWriter;
use std::path::Path;

use anyhow::Context;

/// `rgb` holds `width * height` pixels, 3 bytes each, rows top to bottom.
pub fn write_png(path: &Path, width: u32, height: u32, rgb: &[u8]) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut enc = png::Encoder::new(BufWriter::new(file), width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc
        .write_header()
        .with_context(|| format!("writing {}", path.display()))?;
    w.write_image_data(rgb)
        .with_context(|| format!("writing {}", path.display()))?;
    w.finish()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
