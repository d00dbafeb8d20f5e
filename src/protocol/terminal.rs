//! Terminal frames (docs/PROTOCOL.md, "Terminal sessions"): the screen a client gets when it
//! attaches, the output and end of a terminal, sent to every client watching it, the client's
//! acknowledgement, and the limits that bound them.

use serde::{Deserialize, Serialize};

/// Unacknowledged output, per watching client, past which the agent stops reading a terminal.
pub const TERM_WINDOW: u64 = 256 << 10;
/// Most bytes of output in one `term_output` frame.
pub const TERM_CHUNK: usize = 16 << 10;
/// Longest `data` of one `term_input`, in bytes.
pub const MAX_TERM_INPUT: usize = 64 << 10;
/// Terminals one agent keeps at once, running or ended.
pub const MAX_TERMINALS: usize = 16;
/// Largest `cols` and `rows` accepted.
pub const MAX_TERM_SIZE: u16 = 1000;
/// Largest `cols` × `rows` accepted: the agent keeps every terminal's screen.
pub const MAX_TERM_CELLS: u32 = 250_000;
/// Longest a terminal nobody watches, types into or reads from is kept.
pub const TERM_IDLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// Bytes a terminal's program wrote: `data` (base64) starts at byte `offset` of everything the
/// terminal has written since it started.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct TermOutput {
    pub term: String,
    pub offset: u64,
    pub data: String,
}

/// The screen of a terminal, sent to a client that attaches, before any output after it: `data`
/// (base64) written to a terminal emulator of `cols` × `rows` reproduces what the terminal shows —
/// a reset, the lines above the screen, the screen, the alternate screen when a program opened
/// it, the cursor, colours and input modes — as it stood after the output before `offset`. The
/// live output that follows starts at `offset`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct TermSnapshot {
    pub term: String,
    pub offset: u64,
    pub cols: u16,
    pub rows: u16,
    pub data: String,
}

/// A terminal's program ended with `code` (128 + the signal when a signal ended it).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct TermExit {
    pub term: String,
    pub code: i64,
}

/// A client has every byte of the terminal's output before `offset`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct TermAck {
    pub term: String,
    pub offset: u64,
    /// The environment whose terminal it is (its envKey or name); the host passes it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}
