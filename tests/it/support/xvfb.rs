//! A virtual X display for the screenshot tests.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// An Xvfb server on a free display, stopped when dropped.
pub struct Xvfb {
    child: Child,
    pub display: String,
}

impl Xvfb {
    /// A virtual X server, or `None` (with a note on stderr) where Xvfb is not installed outside
    /// CI, so `cargo test` passes on a machine with only the Rust toolchain. Under CI (`CI` set,
    /// as `.ci/run` runs, after installing it) a missing Xvfb fails the test.
    pub fn start(screen: &str) -> Option<Xvfb> {
        let spawned = Command::new("Xvfb")
            .args(["-displayfd", "1", "-screen", "0", screen, "-nolisten", "tcp", "-noreset"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let advice = "Xvfb is not installed: install xvfb (apt-get install xvfb) to run the screenshot tests";
                if std::env::var_os("CI").is_some() {
                    panic!("{advice}");
                }
                eprintln!("skipped: {advice}");
                return None;
            }
            Err(err) => panic!("could not start Xvfb: {err}"),
        };
        // Xvfb writes the display number it chose once it accepts connections. `-noreset` keeps
        // it from resetting (and forgetting the painted background) when xsetroot disconnects.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let number = line.trim();
        assert!(!number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()), "Xvfb did not start: {line:?}");
        Some(Xvfb { display: format!(":{number}"), child })
    }

    /// Paints the root window; false when `xsetroot` is not installed.
    pub fn paint(&self, colour: &str) -> bool {
        match Command::new("xsetroot").args(["-display", &self.display, "-solid", colour]).status() {
            Ok(status) => {
                assert!(status.success(), "xsetroot failed");
                true
            }
            Err(_) => false,
        }
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
