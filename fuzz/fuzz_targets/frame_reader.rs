//! The relay's frame reader against tungstenite's: the same client bytes, read `split + 1` bytes at
//! a time (the input's first byte), must give the same messages and the same refusals
//! (`voxa::relay::reader_check`); the verdict must not depend on how the bytes were split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voxa::relay::reader_check;

thread_local! {
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().build().expect("runtime");
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, data)) = data.split_first() else { return };
    RUNTIME.with(|runtime| {
        let whole = runtime.block_on(reader_check::compare(data, data.len()));
        let whole = whole.unwrap_or_else(|differ| panic!("{differ}"));
        let split = runtime.block_on(reader_check::compare(data, usize::from(split) + 1));
        assert_eq!(split.unwrap_or_else(|differ| panic!("{differ}")), whole, "verdict depends on read sizes");
    });
});
