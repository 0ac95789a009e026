//! The little WASI a plugin may use: stdout/stderr (to the host's logs, rate-limited), an empty
//! environment, a monotonic clock, a wall clock frozen at the Unix epoch and seeded randomness.
//! No filesystem, sockets or HTTP: a component importing those is refused at load.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::{HostWallClock, WasiCtx};

/// Interfaces a plugin component may import (by prefix, any version). Everything else is refused
/// at load, naming the import.
pub const ALLOWED_IMPORTS: &[&str] = &[
    "wasched:plugin/types@",
    "wasi:io/error@",
    "wasi:io/poll@",
    "wasi:io/streams@",
    "wasi:cli/stdout@",
    "wasi:cli/stderr@",
    "wasi:cli/stdin@",
    "wasi:cli/environment@",
    "wasi:cli/exit@",
    "wasi:cli/terminal-input@",
    "wasi:cli/terminal-output@",
    "wasi:cli/terminal-stdin@",
    "wasi:cli/terminal-stdout@",
    "wasi:cli/terminal-stderr@",
    "wasi:clocks/monotonic-clock@",
    "wasi:clocks/wall-clock@",
    "wasi:random/random@",
    "wasi:random/insecure@",
    "wasi:random/insecure-seed@",
];

/// True when a plugin may import `name`.
pub fn import_allowed(name: &str) -> bool {
    ALLOWED_IMPORTS
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// Lines of guest output logged per plugin stream and second; the rest are counted and dropped.
pub const OUTPUT_LINES_PER_SECOND: u32 = 20;
/// Longest line logged; longer lines are cut.
pub const OUTPUT_LINE_BYTES: usize = 512;

/// The WASI context of one plugin instance.
pub fn context(plugin: &str, seed: u64) -> WasiCtx {
    let mut builder = WasiCtx::builder();
    builder
        .stdout(GuestOutput::new(plugin, "stdout"))
        .stderr(GuestOutput::new(plugin, "stderr"))
        .wall_clock(FrozenWallClock)
        .secure_random(wasmtime_wasi::Deterministic::new(
            seed.to_le_bytes().repeat(4),
        ))
        .insecure_random(wasmtime_wasi::Deterministic::new(
            seed.rotate_left(17).to_le_bytes().to_vec(),
        ))
        .insecure_random_seed(u128::from(seed));
    builder.build()
}

/// A wall clock stuck at the Unix epoch: placement must not depend on the time of day.
struct FrozenWallClock;

impl HostWallClock for FrozenWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

struct OutputState {
    plugin: String,
    stream: &'static str,
    line: Vec<u8>,
    window_start: Instant,
    logged_in_window: u32,
    dropped: u64,
}

impl OutputState {
    fn accept(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if byte == b'\n' {
                self.emit();
            } else if self.line.len() < OUTPUT_LINE_BYTES {
                self.line.push(byte);
            }
        }
    }

    fn emit(&mut self) {
        let now = Instant::now();
        if now.duration_since(self.window_start) >= Duration::from_secs(1) {
            if self.dropped > 0 {
                tracing::warn!(plugin = %self.plugin, stream = self.stream, dropped = self.dropped, "plugin output rate-limited: lines dropped");
            }
            self.window_start = now;
            self.logged_in_window = 0;
            self.dropped = 0;
        }
        if self.logged_in_window < OUTPUT_LINES_PER_SECOND {
            self.logged_in_window += 1;
            let text = String::from_utf8_lossy(&self.line);
            tracing::info!(plugin = %self.plugin, stream = self.stream, "{text}");
        } else {
            self.dropped += 1;
        }
        self.line.clear();
    }
}

/// A plugin's stdout or stderr: complete lines go to `tracing` with the plugin's name, at most
/// [`OUTPUT_LINES_PER_SECOND`] per second; writes always succeed, so a noisy plugin is never failed
/// for being noisy.
#[derive(Clone)]
pub struct GuestOutput(Arc<Mutex<OutputState>>);

impl GuestOutput {
    /// The output of `plugin`'s `stream` (`stdout` or `stderr`), logged under its name.
    pub fn new(plugin: &str, stream: &'static str) -> Self {
        GuestOutput(Arc::new(Mutex::new(OutputState {
            plugin: plugin.to_string(),
            stream,
            line: Vec::new(),
            window_start: Instant::now(),
            logged_in_window: 0,
            dropped: 0,
        })))
    }

    fn accept(&self, bytes: &[u8]) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .accept(bytes);
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.accept(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.accept(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_allowed_by_interface() {
        for ok in [
            "wasi:cli/stdout@0.2.6",
            "wasi:io/streams@0.2.0",
            "wasched:plugin/types@0.1.0",
            "wasi:random/random@0.2.3",
        ] {
            assert!(import_allowed(ok), "{ok}");
        }
        for refused in [
            "wasi:filesystem/types@0.2.0",
            "wasi:filesystem/preopens@0.2.0",
            "wasi:sockets/tcp@0.2.0",
            "wasi:http/outgoing-handler@0.2.0",
            "wasi:cli/stdout",
            "example:evil/api@1.0.0",
        ] {
            assert!(!import_allowed(refused), "{refused}");
        }
    }

    #[test]
    fn output_beyond_the_rate_is_counted_not_logged() {
        let output = GuestOutput::new("Noisy", "stdout");
        for _ in 0..100 {
            output.accept(b"hello\n");
        }
        output.accept(b"partial line without newline");
        let state = output.0.lock().unwrap();
        assert_eq!(state.logged_in_window, OUTPUT_LINES_PER_SECOND);
        assert_eq!(state.dropped, 100 - u64::from(OUTPUT_LINES_PER_SECOND));
        assert_eq!(state.line, b"partial line without newline");
    }
}
