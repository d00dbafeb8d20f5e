//! `cargo bench`: every performance figure of the README in one table. Each section measures the
//! real binaries and sockets on loopback and prints medians.

mod agent;
mod report;
mod voice;

fn main() {
    let mut report = report::Report::default();
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    if wanted("agent") {
        agent::run(&mut report);
    }
    if wanted("voice") {
        voice::run(&mut report);
    }
    report.print();
}
