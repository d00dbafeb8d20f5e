//! `cargo bench`: every performance figure of docs/PERFORMANCE.md in one table. Each section measures the
//! real binaries and sockets on loopback and prints medians.
//!
//! `cargo test --all-targets` runs this file too, without `--bench`: then each section does a few
//! runs only, to prove it still works, and the figures mean nothing.
//! `cargo bench -- agent` runs only the sections whose name contains `agent` (`relay` runs both
//! relay sections, `relay-cpu` only the CPU comparison).

mod agent;
mod back;
mod bytes;
mod child;
mod floor;
mod hosted;
mod pair;
mod preauth;
mod relay;
mod relay_cpu;
mod render;
mod report;
mod seal;
mod sessions;
mod terminal;
mod voice;
mod web;
mod web_floor;

fn main() {
    if std::env::args().nth(1).as_deref() == Some(floor::ARG) {
        if let Err(err) = floor::serve() {
            eprintln!("floor relay failed: {err:#}");
            std::process::exit(1);
        }
        return;
    }
    let measuring = std::env::args().any(|arg| arg == "--bench");
    let runs = |full: usize| if measuring { full } else { 3 };
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let mut report = report::Report::default();
    if wanted("pair") {
        pair::run(&mut report, runs(200));
    }
    if wanted("relay") {
        relay::run(&mut report, measuring);
    }
    if wanted("relay-cpu") {
        relay_cpu::run(&mut report, measuring);
    }
    if wanted("agent") {
        agent::run(&mut report, measuring);
        preauth::run(&mut report, measuring);
    }
    if wanted("voice") {
        voice::run(&mut report, measuring);
    }
    if wanted("voice-page") {
        voice::run_page(&mut report, measuring);
    }
    if wanted("hosted") {
        hosted::run(&mut report, measuring);
    }
    if wanted("seal") {
        seal::run(&mut report, measuring);
    }
    if wanted("sessions") {
        sessions::run(&mut report, measuring);
    }
    if wanted("sessions-env") {
        sessions::run_env(&mut report, measuring);
    }
    if wanted("bytes") {
        bytes::run(&mut report, measuring);
    }
    if wanted("terminal") {
        terminal::run(&mut report, measuring);
    }
    if wanted("web") {
        web::run(&mut report, runs(20));
    }
    if wanted("render") {
        render::run(&mut report, measuring);
    }
    if wanted("back") {
        back::run(&mut report, runs(20));
    }
    if wanted("web-network") {
        // A smoke run loads each page once: ten loads at a phone's pace are for the figures.
        web::run_network(&mut report, if measuring { 10 } else { 1 });
    }
    report.print();
}
