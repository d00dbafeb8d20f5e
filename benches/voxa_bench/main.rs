//! `cargo bench`: every performance figure of the README in one table. Each section measures the
//! real binaries and sockets on loopback and prints medians.

mod relay;
mod report;

fn main() {
    let mut report = report::Report::default();
    relay::run(&mut report);
    report.print();
}
