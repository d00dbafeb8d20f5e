//! Interactive terminals (docs/PROTOCOL.md, "Terminal sessions"): a real PTY the phone types into,
//! that keeps running while no phone is connected. [`pty`] starts the program and moves its bytes,
//! [`term`] delivers one terminal's output under flow control, [`screen`] keeps what it shows
//! (parsing only what [`scan`] says it cannot forget) for the snapshot a client attaching gets,
//! [`tools`] runs the `term_*` tools the dispatcher hands over. The host below keeps the
//! terminals, at most [`MAX_TERMINALS`], and closes those left idle past [`TERM_IDLE_LIMIT`].

mod pty;
mod scan;
mod screen;
mod term;
mod tools;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::protocol::{
    ErrorCode, Frame, TermAck, ToolError, MAX_TERMINALS, MAX_TERM_CELLS, MAX_TERM_SIZE, TERM_IDLE_LIMIT,
};
use crate::tools::Toolbox;
use term::{Described, Terminal};

/// How often the host looks for terminals left idle.
const IDLE_SWEEP: Duration = Duration::from_secs(60);

/// How to build a [`TerminalHost`].
pub struct TerminalHostOptions {
    /// The workspace fence (every `cwd` resolves inside it) and the programs' environment.
    pub toolbox: Toolbox,
    pub tasks: TaskTracker,
    /// Every terminal is closed when it fires.
    pub shutdown: CancellationToken,
}

/// The terminals of one agent.
#[derive(Clone)]
pub struct TerminalHost {
    inner: Arc<Inner>,
}

struct Inner {
    toolbox: Toolbox,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    terminals: Mutex<Vec<Arc<Terminal>>>,
}

/// What `term_open` asks for.
pub struct OpenRequest {
    pub cols: u64,
    pub rows: u64,
    /// Relative to the workspace; `None` for its root.
    pub cwd: Option<String>,
    /// A command line for `/bin/sh -c`; `None` for the user's login shell.
    pub command: Option<String>,
}

impl TerminalHost {
    /// A host with no terminals; it sweeps idle ones until `shutdown`.
    pub fn new(options: TerminalHostOptions) -> Self {
        let TerminalHostOptions { toolbox, tasks, shutdown } = options;
        let host = TerminalHost { inner: Arc::new(Inner { toolbox, tasks, shutdown, terminals: Mutex::default() }) };
        let sweeping = host.clone();
        host.inner.tasks.spawn(async move { sweeping.sweep_idle().await });
        host
    }

    /// Opens a terminal; with `viewer`, that client watches it from its first byte.
    pub async fn open(&self, request: OpenRequest, viewer: Option<mpsc::Sender<Frame>>) -> Result<String, ToolError> {
        let (cols, rows) = checked_size(request.cols, request.rows)?;
        if let Some(command) = &request.command {
            crate::tools::args::check_text("command", command, crate::tools::MAX_COMMAND_LEN)?;
        }
        let cwd = self.inner.toolbox.directory(request.cwd.as_deref())?;
        self.make_room()?;
        let env = self.inner.toolbox.child_env();
        let launch = pty::Launch { command: request.command.as_deref(), cwd: &cwd, env: &env, cols, rows };
        let spawned = pty::spawn(launch)?;
        let shown_cwd = cwd
            .strip_prefix(self.inner.toolbox.workspace())
            .ok()
            .map(|relative| relative.display().to_string())
            .filter(|relative| !relative.is_empty())
            .unwrap_or_else(|| ".".into());
        let described = Described {
            command: request.command.unwrap_or_else(|| self.login_shell()),
            cwd: shown_cwd,
            started_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
        };
        let id = format!("t-{}", hex::encode(rand::random::<[u8; 8]>()));
        let terminal =
            Terminal::start(id.clone(), described, spawned, (cols, rows), &self.inner.tasks, &self.inner.shutdown);
        if let Some(viewer) = viewer {
            terminal.attach(viewer).await;
        }
        if let Ok(mut terminals) = self.inner.terminals.lock() {
            terminals.push(terminal);
        }
        Ok(id)
    }

    /// The terminal `id`, or `not-found`.
    fn get(&self, id: &str) -> Result<Arc<Terminal>, ToolError> {
        let terminals =
            self.inner.terminals.lock().map_err(|_| ToolError::new(ErrorCode::Internal, "terminals unusable"))?;
        terminals.iter().find(|terminal| terminal.id == id).cloned().ok_or_else(|| {
            ToolError::new(ErrorCode::NotFound, format!("no terminal {:?}", crate::text::prefix(id, 64)))
        })
    }

    /// Every terminal, oldest first, as `term_list` shows them.
    pub fn list(&self) -> Vec<Value> {
        let terminals = self.inner.terminals.lock().map(|terminals| terminals.clone()).unwrap_or_default();
        terminals.iter().map(|terminal| terminal.describe()).collect()
    }

    /// How many terminals still running were written to, typed into or read within `window`.
    pub fn in_use(&self, window: Duration) -> usize {
        let terminals = self.inner.terminals.lock().map(|terminals| terminals.clone()).unwrap_or_default();
        terminals.iter().filter(|terminal| !terminal.has_exited() && terminal.idle_for() < window).count()
    }

    /// Closes terminal `id` and forgets it.
    pub fn close(&self, id: &str) -> Result<(), ToolError> {
        let terminal = self.get(id)?;
        terminal.close();
        if let Ok(mut terminals) = self.inner.terminals.lock() {
            terminals.retain(|kept| kept.id != terminal.id);
        }
        Ok(())
    }

    /// A client's `term_ack`; one for a terminal it does not watch changes nothing.
    pub async fn ack(&self, ack: &TermAck, viewer: &mpsc::Sender<Frame>) {
        if let Ok(terminal) = self.get(&ack.term) {
            terminal.ack(viewer, ack.offset).await;
        }
    }

    /// Frees a place for one more terminal: the oldest that has ended goes, else `busy`.
    fn make_room(&self) -> Result<(), ToolError> {
        let mut terminals =
            self.inner.terminals.lock().map_err(|_| ToolError::new(ErrorCode::Internal, "terminals unusable"))?;
        if terminals.len() < MAX_TERMINALS {
            return Ok(());
        }
        match terminals.iter().position(|terminal| terminal.has_exited()) {
            Some(ended) => {
                terminals.remove(ended).close();
                Ok(())
            }
            None => Err(ToolError::new(
                ErrorCode::Busy,
                format!("{MAX_TERMINALS} terminals are open; close one (term_close) first"),
            )),
        }
    }

    /// The shell a terminal without a command runs, as listed: `SHELL` of the programs' environment.
    fn login_shell(&self) -> String {
        self.inner.toolbox.env_var("SHELL").map_or_else(|| "login shell".into(), |shell| shell.to_string_lossy().into())
    }

    /// Closes, every [`IDLE_SWEEP`], the terminals nobody watched or used for [`TERM_IDLE_LIMIT`].
    async fn sweep_idle(&self) {
        loop {
            tokio::select! {
                _ = self.inner.shutdown.cancelled() => return,
                _ = tokio::time::sleep(IDLE_SWEEP) => {}
            }
            let terminals = self.inner.terminals.lock().map(|terminals| terminals.clone()).unwrap_or_default();
            for terminal in terminals {
                if terminal.idle_for() >= TERM_IDLE_LIMIT && !terminal.watched().await {
                    tracing::info!(term = %terminal.id, "closing a terminal left idle");
                    let _ = self.close(&terminal.id);
                }
            }
        }
    }
}

/// `cols` and `rows` within 1 to [`MAX_TERM_SIZE`], and at most [`MAX_TERM_CELLS`] cells.
fn checked_size(cols: u64, rows: u64) -> Result<(u16, u16), ToolError> {
    let within = |value: u64| (1..=u64::from(MAX_TERM_SIZE)).contains(&value);
    if !within(cols) || !within(rows) {
        return Err(ToolError::new(
            ErrorCode::InvalidArgs,
            format!("fields `cols` and `rows` must be between 1 and {MAX_TERM_SIZE}"),
        ));
    }
    if cols * rows > u64::from(MAX_TERM_CELLS) {
        return Err(ToolError::new(
            ErrorCode::InvalidArgs,
            format!("a terminal of {cols} × {rows} is too large: at most {MAX_TERM_CELLS} cells"),
        ));
    }
    Ok((cols as u16, rows as u16))
}
