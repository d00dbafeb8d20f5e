//! `cargo bench`: every performance figure of the README in one table. Each section measures the
//! real binaries and sockets on loopback and prints medians.
//!
//! `cargo test --all-targets` runs this file too, without `--bench`: then each section does a few
//! runs only, to prove it still works, and the figures mean nothing.

mod pair;
mod report;

fn main() {
    let measuring = std::env::args().any(|arg| arg == "--bench");
    let runs = |full: usize| if measuring { full } else { 3 };
    let mut report = report::Report::default();
    pair::run(&mut report, runs(200));
    report.print();
}
