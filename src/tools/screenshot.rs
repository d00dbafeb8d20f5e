//! `screenshot`: the screen as a PNG. X11 on Linux (read straight from the server, converted
//! with the visual's own channel masks), `screencapture -x` on macOS. No display → `unavailable`.
//!
//! Memory stays bounded on any screen size: the root window is read in bands of rows and each
//! band is fed to a streaming PNG encoder whose output is capped at [`MAX_SCREENSHOT_LEN`].

use std::io::Write;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use serde_json::json;

use super::args::Args;
use super::{Screenshot, ToolOutput, Toolbox};
use crate::protocol::{ErrorCode, ToolError};

/// Largest encoded screenshot; its base64 must still fit one 16 MiB frame.
pub const MAX_SCREENSHOT_LEN: usize = 11 << 20;
/// Longest a capture may take before it answers `timeout`.
pub const SCREENSHOT_TIMEOUT: Duration = Duration::from_secs(30);
/// Raw bytes requested from the X server per `GetImage`.
const BAND_BYTES: usize = 4 << 20;

/// A `screenshot` call: the display it names, and the one the tools' environment names.
pub(crate) struct ScreenshotRequest {
    display: Option<String>,
    env_display: Option<String>,
}

impl ScreenshotRequest {
    pub(crate) fn parse(args: &Args<'_>, toolbox: &Toolbox) -> Self {
        let env_display = toolbox.env_var("DISPLAY").map(|value| value.to_string_lossy().into_owned());
        ScreenshotRequest { display: args.str("display").map(str::to_owned), env_display }
    }

    /// Takes it: the image goes to the phone only, the model learns its size.
    pub(crate) async fn run(self, cancel: CancellationToken) -> Result<ToolOutput, ToolError> {
        let shot = take(self.display, self.env_display, cancel).await?;
        let result =
            json!({ "width": shot.width, "height": shot.height, "mime": shot.mime, "bytes": shot.bytes.len() });
        Ok(ToolOutput { result, image: Some(shot) })
    }
}

/// Takes a screenshot of `display` (an argument) or else the environment's display.
pub(crate) async fn take(
    display_arg: Option<String>,
    env_display: Option<String>,
    cancel: CancellationToken,
) -> Result<Screenshot, ToolError> {
    let target = target(display_arg, env_display)?;
    let capture = tokio::task::spawn_blocking(move || capture(&target));
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(ToolError::new(ErrorCode::Cancelled, "screenshot cancelled")),
        joined = tokio::time::timeout(SCREENSHOT_TIMEOUT, capture) => match joined {
            Ok(Ok(result)) => result,
            Ok(Err(err)) => Err(ToolError::new(ErrorCode::Internal, format!("screenshot failed: {err}"))),
            Err(_) => Err(ToolError::new(
                ErrorCode::Timeout,
                format!("the display did not answer within {} s", SCREENSHOT_TIMEOUT.as_secs()),
            )),
        },
    }
}

/// A bounded `Write` into memory: fails once more than `limit` bytes arrive.
struct CappedBuffer {
    bytes: Vec<u8>,
    limit: usize,
}

impl Write for CappedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, "screenshot too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn too_large() -> ToolError {
    ToolError::new(
        ErrorCode::TooLarge,
        format!("the screenshot would be over {} MiB; lower the screen resolution", MAX_SCREENSHOT_LEN >> 20),
    )
}

fn unavailable(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::Unavailable, message)
}

#[cfg(not(target_os = "macos"))]
fn target(display_arg: Option<String>, env_display: Option<String>) -> Result<String, ToolError> {
    match display_arg {
        // Only local displays: an argument must not make the agent dial another host.
        Some(display) if is_local_display(&display) => Ok(display),
        Some(display) => Err(ToolError::new(
            ErrorCode::InvalidArgs,
            format!("field `display` must name a local X display like \":0\", not {display:?}"),
        )),
        None => env_display.filter(|display| !display.is_empty()).ok_or_else(|| {
            unavailable("no display to capture: DISPLAY is not set (no graphical session is running for this agent)")
        }),
    }
}

/// `:N` or `:N.S`, with at most four digits (the X port 6000 + N must fit in 16 bits).
#[cfg(not(target_os = "macos"))]
fn is_local_display(display: &str) -> bool {
    let Some(rest) = display.strip_prefix(':') else { return false };
    let (number, screen) = rest.split_once('.').map_or((rest, None), |(n, s)| (n, Some(s)));
    let digits = |text: &str| !text.is_empty() && text.len() <= 4 && text.bytes().all(|b| b.is_ascii_digit());
    digits(number) && screen.is_none_or(digits)
}

#[cfg(not(target_os = "macos"))]
fn capture(display: &str) -> Result<Screenshot, ToolError> {
    use x11rb::connection::Connection;

    let (conn, screen_num) = x11rb::connect(Some(display))
        .map_err(|err| unavailable(format!("cannot connect to display {display}: {err}")))?;
    let setup = conn.setup();
    let screen =
        setup.roots.get(screen_num).ok_or_else(|| unavailable(format!("display {display} has no such screen")))?;
    let layout = root_layout(setup, screen, display)?;
    Ok(Screenshot {
        mime: "image/png".into(),
        width: u32::from(screen.width_in_pixels),
        height: u32::from(screen.height_in_pixels),
        bytes: encode_screen(&conn, screen, &layout, display)?,
    })
}

/// How the root window's pixels are laid out; only true-colour screens can be captured.
#[cfg(not(target_os = "macos"))]
fn root_layout(
    setup: &x11rb::protocol::xproto::Setup,
    screen: &x11rb::protocol::xproto::Screen,
    display: &str,
) -> Result<PixelLayout, ToolError> {
    use x11rb::protocol::xproto::{ImageOrder, VisualClass};

    let format = setup.pixmap_formats.iter().find(|format| format.depth == screen.root_depth).ok_or_else(|| {
        unavailable(format!("display {display} lists no pixel format for depth {}", screen.root_depth))
    })?;
    let visual = screen
        .allowed_depths
        .iter()
        .flat_map(|depth| depth.visuals.iter())
        .find(|visual| visual.visual_id == screen.root_visual)
        .ok_or_else(|| unavailable(format!("display {display} does not describe its root visual")))?;
    if visual.class != VisualClass::TRUE_COLOR {
        return Err(unavailable(format!(
            "display {display} uses a colour-mapped visual (class {}); only true-colour screens can be captured",
            u8::from(visual.class)
        )));
    }
    PixelLayout::new(
        format.bits_per_pixel,
        format.scanline_pad,
        setup.image_byte_order == ImageOrder::MSB_FIRST,
        [visual.red_mask, visual.green_mask, visual.blue_mask],
    )
    .map_err(unavailable)
}

/// The root window as a PNG, read band by band so memory stays near [`BAND_BYTES`], the encoded
/// image capped at [`MAX_SCREENSHOT_LEN`].
#[cfg(not(target_os = "macos"))]
fn encode_screen(
    conn: &impl x11rb::connection::Connection,
    screen: &x11rb::protocol::xproto::Screen,
    layout: &PixelLayout,
    display: &str,
) -> Result<Vec<u8>, ToolError> {
    use x11rb::protocol::xproto::{ConnectionExt, ImageFormat};

    let (width, height) = (screen.width_in_pixels, screen.height_in_pixels);
    let mut png_bytes = CappedBuffer { bytes: Vec::new(), limit: MAX_SCREENSHOT_LEN };
    let mut encoder = png::Encoder::new(&mut png_bytes, u32::from(width), u32::from(height));
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(png_error)?;
    let mut stream = writer.stream_writer().map_err(png_error)?;
    let stride = layout.stride(width);
    let rows_per_band = (BAND_BYTES / stride.max(1)).clamp(1, usize::from(u16::MAX)) as u16;
    let x11_error =
        |err: &dyn std::fmt::Display| ToolError::new(ErrorCode::Internal, format!("display {display}: {err}"));
    let mut rgb = Vec::new();
    let mut y: u16 = 0;
    while y < height {
        let rows = rows_per_band.min(height - y);
        let top = i16::try_from(y).map_err(|_| unavailable("screen is taller than X11 allows"))?;
        let cookie = conn
            .get_image(ImageFormat::Z_PIXMAP, screen.root, 0, top, width, rows, !0)
            .map_err(|err| x11_error(&err))?;
        let reply = cookie.reply().map_err(|err| x11_error(&err))?;
        layout
            .to_rgb(&reply.data, usize::from(width), usize::from(rows), &mut rgb)
            .map_err(|err| ToolError::new(ErrorCode::Internal, err))?;
        stream.write_all(&rgb).map_err(|err| match err.kind() {
            std::io::ErrorKind::FileTooLarge => too_large(),
            _ => ToolError::new(ErrorCode::Internal, format!("could not encode the screenshot: {err}")),
        })?;
        y += rows;
    }
    stream.finish().map_err(png_error)?;
    drop(writer);
    Ok(png_bytes.bytes)
}

fn png_error(err: png::EncodingError) -> ToolError {
    match err {
        png::EncodingError::IoError(io) if io.kind() == std::io::ErrorKind::FileTooLarge => too_large(),
        other => ToolError::new(ErrorCode::Internal, format!("could not encode the screenshot: {other}")),
    }
}

/// How a Z-pixmap scanline stores pixels, and how to turn one into 8-bit RGB.
#[derive(Clone, Debug)]
pub(crate) struct PixelLayout {
    bits_per_pixel: u8,
    scanline_pad: u8,
    msb_first: bool,
    /// Per channel (red, green, blue): mask, shift and the channel's maximum value.
    channels: [(u32, u32, u32); 3],
}

impl PixelLayout {
    pub fn new(bits_per_pixel: u8, scanline_pad: u8, msb_first: bool, masks: [u32; 3]) -> Result<Self, String> {
        if !matches!(bits_per_pixel, 8 | 16 | 24 | 32) {
            return Err(format!("{bits_per_pixel} bits per pixel is not supported"));
        }
        if !matches!(scanline_pad, 8 | 16 | 32) {
            return Err(format!("scanline padding of {scanline_pad} bits is not supported"));
        }
        let mut channels = [(0, 0, 0); 3];
        for (channel, mask) in channels.iter_mut().zip(masks) {
            if mask == 0 {
                return Err("the visual has an empty colour mask".into());
            }
            let shift = mask.trailing_zeros();
            let bits = (mask >> shift).count_ones();
            *channel = (mask, shift, (1u64 << bits).saturating_sub(1) as u32);
        }
        Ok(PixelLayout { bits_per_pixel, scanline_pad, msb_first, channels })
    }

    /// Bytes per scanline for `width` pixels, padding included.
    pub fn stride(&self, width: u16) -> usize {
        let bits = usize::from(width) * usize::from(self.bits_per_pixel);
        let pad = usize::from(self.scanline_pad);
        bits.div_ceil(pad) * pad / 8
    }

    /// Converts `rows` scanlines of `data` into packed RGB in `out` (replaced).
    pub fn to_rgb(&self, data: &[u8], width: usize, rows: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let width16 = u16::try_from(width).map_err(|_| "screen too wide".to_owned())?;
        let stride = self.stride(width16);
        if data.len() < stride * rows {
            return Err(format!("the display sent {} bytes for {rows} rows of {stride}", data.len()));
        }
        let bytes_per_pixel = usize::from(self.bits_per_pixel / 8);
        out.clear();
        out.reserve(width * rows * 3);
        for row in data.chunks_exact(stride).take(rows) {
            for pixel in row[..width * bytes_per_pixel].chunks_exact(bytes_per_pixel) {
                let value = if self.msb_first {
                    pixel.iter().fold(0u32, |acc, &byte| (acc << 8) | u32::from(byte))
                } else {
                    pixel.iter().rev().fold(0u32, |acc, &byte| (acc << 8) | u32::from(byte))
                };
                for &(mask, shift, max) in &self.channels {
                    let level = (value & mask) >> shift;
                    out.push(((u64::from(level) * 255 + u64::from(max) / 2) / u64::from(max)) as u8);
                }
            }
        }
        Ok(())
    }
}

#[cfg(target_os = "macos")]
fn target(display_arg: Option<String>, _env_display: Option<String>) -> Result<String, ToolError> {
    match display_arg {
        Some(display) if !display.is_empty() && display.len() <= 3 && display.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(display)
        }
        Some(display) => Err(ToolError::new(
            ErrorCode::InvalidArgs,
            format!("field `display` must be a display number like \"1\", not {display:?}"),
        )),
        None => Ok(String::new()),
    }
}

#[cfg(target_os = "macos")]
fn capture(display: &str) -> Result<Screenshot, ToolError> {
    let path = std::env::temp_dir().join(format!("voxa-screenshot-{:016x}.png", rand::random::<u64>()));
    let mut command = std::process::Command::new("/usr/sbin/screencapture");
    command.args(["-x", "-t", "png"]);
    if !display.is_empty() {
        command.args(["-D", display]);
    }
    let output = command.arg(&path).output();
    let bytes = std::fs::read(&path);
    let _ = std::fs::remove_file(&path);
    let output = output.map_err(|err| unavailable(format!("cannot run screencapture: {err}")))?;
    let bytes = match bytes {
        Ok(bytes) if output.status.success() && !bytes.is_empty() => bytes,
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(unavailable(format!(
                "screencapture could not capture the screen (is Screen Recording allowed for this terminal?) {}",
                stderr.trim()
            )));
        }
    };
    if bytes.len() > MAX_SCREENSHOT_LEN {
        return Err(too_large());
    }
    // IHDR is always the first chunk: width and height are big-endian at bytes 16..24.
    let dimension = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let (Some(width), Some(height)) = (dimension(16), dimension(20)) else {
        return Err(ToolError::new(ErrorCode::Internal, "screencapture wrote something that is not a PNG"));
    };
    Ok(Screenshot { mime: "image/png".into(), width, height, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_pixel_formats_convert_to_the_same_colours() {
        // 24-bit depth in 32-bit pixels, least significant byte first (the usual X server).
        let bgrx = PixelLayout::new(32, 32, false, [0xff0000, 0x00ff00, 0x0000ff]).unwrap();
        let mut out = Vec::new();
        bgrx.to_rgb(&[0x10, 0x20, 0x30, 0x00, 0xff, 0x00, 0x00, 0x00], 2, 1, &mut out).unwrap();
        assert_eq!(out, [0x30, 0x20, 0x10, 0x00, 0x00, 0xff]);

        // The same pixel most significant byte first.
        let xrgb = PixelLayout::new(32, 32, true, [0xff0000, 0x00ff00, 0x0000ff]).unwrap();
        xrgb.to_rgb(&[0x00, 0x30, 0x20, 0x10], 1, 1, &mut out).unwrap();
        assert_eq!(out, [0x30, 0x20, 0x10]);

        // 16-bit 5-6-5: full red, full green, half blue; rows padded to 32 bits.
        let rgb565 = PixelLayout::new(16, 32, false, [0xf800, 0x07e0, 0x001f]).unwrap();
        assert_eq!(rgb565.stride(3), 8);
        let pixels: [u16; 3] = [0xf800, 0x07e0, 0x0010];
        let mut data: Vec<u8> = pixels.iter().flat_map(|p| p.to_le_bytes()).collect();
        data.extend([0xaa, 0xaa]);
        rgb565.to_rgb(&data, 3, 1, &mut out).unwrap();
        assert_eq!(out, [255, 0, 0, 0, 255, 0, 0, 0, 132]);

        // 30-bit colour: 10 bits per channel.
        let deep = PixelLayout::new(32, 32, false, [0x3ff00000, 0x000ffc00, 0x000003ff]).unwrap();
        deep.to_rgb(&0x3ff0_0000u32.to_le_bytes(), 1, 1, &mut out).unwrap();
        assert_eq!(out, [255, 0, 0]);
    }

    #[test]
    fn short_or_odd_image_data_is_an_error_not_a_panic() {
        let layout = PixelLayout::new(32, 32, false, [0xff0000, 0x00ff00, 0x0000ff]).unwrap();
        let mut out = Vec::new();
        assert!(layout.to_rgb(&[0; 7], 1, 2, &mut out).is_err());
        assert!(PixelLayout::new(4, 32, false, [1, 2, 4]).is_err());
        assert!(PixelLayout::new(32, 32, false, [0, 2, 4]).is_err());
    }

    #[cfg(not(target_os = "macos"))]
    #[test]
    fn only_local_displays_are_accepted_as_arguments() {
        for ok in [":0", ":99", ":1.0"] {
            assert_eq!(target(Some(ok.into()), None).unwrap(), ok);
        }
        for bad in ["evil.example:0", "localhost:0", ":", ":a", ":1.", ":65000", "unix:0", "/tmp/.X11-unix/X0", ""] {
            assert_eq!(target(Some(bad.into()), None).unwrap_err().code, ErrorCode::InvalidArgs, "{bad}");
        }
        assert_eq!(target(None, None).unwrap_err().code, ErrorCode::Unavailable);
        assert_eq!(target(None, Some(String::new())).unwrap_err().code, ErrorCode::Unavailable);
        assert_eq!(target(None, Some("remote:3".into())).unwrap(), "remote:3");
    }
}
