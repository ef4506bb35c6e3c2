//! Ctrl-C (SIGINT) and SIGTERM: every output being written is staged by the library (a
//! temporary file or directory beside it, renamed into place when complete), so stopping
//! cleanly is removing what is staged ([`paramdex::remove_staged`]), saying so, and exiting
//! with the shell's status for the signal (128 + its number: 130, 143). The final outputs are
//! never touched: each is either as it was or complete.

use std::io::Write;
use std::path::PathBuf;

/// Starts a thread that waits for SIGINT or SIGTERM and then cleans up and exits. Without it
/// (it could not be set up, or off Unix) the signals keep their default action.
#[cfg(unix)]
pub fn watch() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::iterator::Signals;
    let Ok(mut signals) = Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let removed = paramdex::remove_staged();
                let mut err = std::io::stderr().lock();
                // A progress bar may be drawn on the current line of a terminal: clear it.
                use std::io::IsTerminal;
                if std::io::stderr().is_terminal() {
                    let _ = write!(err, "\r\x1b[2K");
                }
                let _ = writeln!(err, "paramdex: {}", message(&removed));
                let _ = err.flush();
                std::process::exit(128 + sig);
            }
        });
}

/// Off Unix the signals keep their default action.
#[cfg(not(unix))]
pub fn watch() {}

/// What the user is told: the staged paths removed, as the outputs were named.
fn message(removed: &[PathBuf]) -> String {
    if removed.is_empty() {
        return "interrupted; nothing was staged".into();
    }
    let paths: Vec<String> = removed.iter().map(|p| p.display().to_string()).collect();
    format!(
        "interrupted; removed {}: {}",
        super::output::count_s(removed.len() as u64, "staged output"),
        paths.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        assert_eq!(message(&[]), "interrupted; nothing was staged");
        assert_eq!(
            message(&[PathBuf::from(".a.pdx.x.pdx-tmp")]),
            "interrupted; removed 1 staged output: .a.pdx.x.pdx-tmp"
        );
        assert_eq!(
            message(&[PathBuf::from(".a.pdx.x.pdx-tmp"), PathBuf::from("o/.b.y")]),
            "interrupted; removed 2 staged outputs: .a.pdx.x.pdx-tmp, o/.b.y"
        );
    }
}
