//! `window:` readiness: an X11 client of coldstart's own that watches for a window.
//!
//! Starting a process such as `xwininfo` on every poll would load the machine while the program
//! under measurement starts, and make the figure late by the time of that process. Instead one
//! connection to `$DISPLAY` asks for the root window's structure events: a window being
//! created, mapped or reparented by a window manager wakes the launcher at once, which then
//! walks the window tree (a few pipelined round trips). A slow periodic walk also catches a
//! window renamed after it was mapped, which sends no event to the root.

use std::os::fd::{AsRawFd, RawFd};

use coldstart_error::Category;
use regex::Regex;
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{
    AtomEnum, ChangeWindowAttributesAux, ConnectionExt as _, EventMask, MapState, Window,
};
use x11rb::rust_connection::RustConnection;

/// How deep below the root window to look: top-level windows, and the client windows a
/// window manager reparents into its frames (two levels).
const MAX_DEPTH: usize = 3;

/// Why `window:` readiness cannot watch.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    /// No X display could be reached.
    #[error(
        "`--ready window:` needs an X display: cannot connect to DISPLAY={display}: {reason}; \
         start one (for example `Xvfb :99 &` and `export DISPLAY=:99`)"
    )]
    Connect {
        /// The display asked for (`DISPLAY`).
        display: String,
        /// Why the connection failed.
        reason: String,
    },
    /// The connection to the display was lost while waiting for the window.
    #[error("the X connection to DISPLAY={display} failed: {reason}")]
    Lost {
        /// The display (`DISPLAY`).
        display: String,
        /// Why the connection failed.
        reason: String,
    },
}

impl WindowError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            WindowError::Connect { .. } => Category::Usage,
            WindowError::Lost { .. } => Category::Environment,
        }
    }
}

/// A connection to `$DISPLAY` watching for a mapped window whose name matches a pattern.
pub struct WindowWatch {
    conn: RustConnection,
    root: Window,
    net_wm_name: u32,
    utf8_string: u32,
    display: String,
}

impl WindowWatch {
    /// Connect to `$DISPLAY` and subscribe to the root window's structure events.
    pub fn connect() -> Result<WindowWatch, WindowError> {
        let display = std::env::var("DISPLAY").unwrap_or_default();
        let shown = if display.is_empty() { "(unset)".to_string() } else { display.clone() };
        let connect_err = |reason: String| WindowError::Connect { display: shown.clone(), reason };
        if display.is_empty() {
            return Err(connect_err("DISPLAY is not set".into()));
        }
        let (conn, screen) = x11rb::connect(None).map_err(|e| connect_err(e.to_string()))?;
        let root = conn.setup().roots[screen].root;
        let mut watch =
            WindowWatch { conn, root, net_wm_name: 0, utf8_string: 0, display: display.clone() };
        let setup = || -> Result<(u32, u32), Box<dyn std::error::Error>> {
            let aux = ChangeWindowAttributesAux::new().event_mask(EventMask::SUBSTRUCTURE_NOTIFY);
            watch.conn.change_window_attributes(root, &aux)?.check()?;
            let a = watch.conn.intern_atom(false, b"_NET_WM_NAME")?;
            let b = watch.conn.intern_atom(false, b"UTF8_STRING")?;
            Ok((a.reply()?.atom, b.reply()?.atom))
        };
        let (net_wm_name, utf8_string) = setup().map_err(|e| connect_err(e.to_string()))?;
        watch.net_wm_name = net_wm_name;
        watch.utf8_string = utf8_string;
        Ok(watch)
    }

    /// The connection's file descriptor: readable when an event arrived.
    pub fn fd(&self) -> RawFd {
        self.conn.stream().as_raw_fd()
    }

    /// Discard the events received so far; returns whether there were any.
    pub fn drain_events(&self) -> Result<bool, WindowError> {
        let mut any = false;
        while self.conn.poll_for_event().map_err(|e| self.lost(e))?.is_some() {
            any = true;
        }
        Ok(any)
    }

    /// Whether a viewable window (mapped, with its ancestors mapped) has a name (`_NET_WM_NAME`
    /// or `WM_NAME`) that `name` matches.
    pub fn mapped(&self, name: &Regex) -> Result<bool, WindowError> {
        self.drain_events()?;
        // Breadth first; a window is viewable only if its parent is, so unmapped subtrees are
        // skipped. Each level's requests are sent together before any reply is awaited.
        let mut level = vec![self.root];
        for _ in 0..MAX_DEPTH {
            let trees: Vec<_> = level
                .iter()
                .map(|&w| self.conn.query_tree(w))
                .collect::<Result<_, _>>()
                .map_err(|e| self.lost(e))?;
            let mut children = Vec::new();
            for t in trees {
                // A window destroyed meanwhile answers with an error: skip it.
                if let Ok(reply) = t.reply() {
                    children.extend(reply.children);
                }
            }
            if children.is_empty() {
                return Ok(false);
            }
            let requests: Vec<_> = children
                .iter()
                .map(|&w| {
                    let attrs = self.conn.get_window_attributes(w)?;
                    let net = self.conn.get_property(
                        false,
                        w,
                        self.net_wm_name,
                        self.utf8_string,
                        0,
                        1024,
                    )?;
                    let wm = self.conn.get_property(
                        false,
                        w,
                        AtomEnum::WM_NAME,
                        AtomEnum::ANY,
                        0,
                        1024,
                    )?;
                    Ok((w, attrs, net, wm))
                })
                .collect::<Result<_, x11rb::errors::ConnectionError>>()
                .map_err(|e| self.lost(e))?;
            let mut next = Vec::new();
            for (w, attrs, net, wm) in requests {
                let viewable = attrs.reply().is_ok_and(|a| a.map_state == MapState::VIEWABLE);
                let names = [net.reply().ok(), wm.reply().ok()];
                if !viewable {
                    continue;
                }
                let matches = names.iter().flatten().any(|p| {
                    !p.value.is_empty() && name.is_match(&String::from_utf8_lossy(&p.value))
                });
                if matches {
                    return Ok(true);
                }
                next.push(w);
            }
            level = next;
        }
        Ok(false)
    }

    fn lost(&self, e: impl std::fmt::Display) -> WindowError {
        WindowError::Lost { display: self.display.clone(), reason: e.to_string() }
    }
}
