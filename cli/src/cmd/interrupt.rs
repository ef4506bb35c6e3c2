//! Ctrl-C (SIGINT) and SIGTERM: every output being written is staged by the library (a
//! temporary file or directory beside it, renamed into place when complete; an object's
//! multipart upload, completed when the object is), so stopping cleanly is removing what is
//! staged ([`paramdex::remove_staged`]), aborting the multipart uploads in flight
//! ([`paramdex::remote::abort_uploads_in_flight`]: a store keeps, and bills, the parts of an
//! upload nobody aborts), saying so, and exiting with the shell's status for the signal
//! (128 + its number: 130, 143). The final outputs are never touched: each is either as it
//! was or complete. A second signal while that runs exits at once.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use paramdex::remote::{AbortOutcome, AbortedUpload};

/// The longest wait for the stores to confirm the aborts.
const ABORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a signal arrived: from then on the clean-up owns the process's exit.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Called when the command has ended, before its result is reported: after a signal, waits for
/// the clean-up to end the process (never returning). The command may end because of the
/// clean-up itself (its upload aborted under it), and its error must not pass for the outcome
/// nor its exit race the clean-up's.
pub fn settle() {
    if INTERRUPTED.load(Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

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
            let mut pending = signals.forever();
            let Some(sig) = pending.next() else {
                return;
            };
            INTERRUPTED.store(true, Ordering::SeqCst);
            // The clean-up on a thread of its own, so that a second signal still ends the
            // process (an abort waiting on a store that does not answer).
            let cleaning = std::thread::Builder::new()
                .name("interrupted".into())
                .spawn(move || clean_up_and_exit(sig));
            if cleaning.is_err() {
                clean_up_and_exit(sig);
            }
            if let Some(again) = pending.next() {
                std::process::exit(128 + again);
            }
        });
}

/// Off Unix the signals keep their default action.
#[cfg(not(unix))]
pub fn watch() {}

/// Removes what is staged, aborts the uploads in flight, says so, and exits with the status
/// of signal `sig`.
#[cfg(unix)]
fn clean_up_and_exit(sig: i32) -> ! {
    let removed = paramdex::remove_staged();
    let aborted = paramdex::remote::abort_uploads_in_flight(ABORT_TIMEOUT);
    let mut err = std::io::stderr().lock();
    // A progress bar may be drawn on the current line of a terminal: clear it.
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        let _ = write!(err, "\r\x1b[2K");
    }
    let _ = writeln!(err, "paramdex: {}", message(&removed, &aborted));
    let _ = err.flush();
    std::process::exit(128 + sig);
}

/// What the user is told: the staged paths removed, as the outputs were named, and the
/// multipart uploads aborted (or that could not be).
fn message(removed: &[PathBuf], uploads: &[AbortedUpload]) -> String {
    let mut said = Vec::new();
    if !removed.is_empty() {
        let paths: Vec<String> = removed.iter().map(|p| p.display().to_string()).collect();
        said.push(format!(
            "removed {}: {}",
            super::output::count_s(removed.len() as u64, "staged output"),
            paths.join(", ")
        ));
    }
    let aborted: Vec<&str> = uploads
        .iter()
        .filter(|u| matches!(u.outcome, AbortOutcome::Aborted))
        .map(|u| u.url.as_str())
        .collect();
    if !aborted.is_empty() {
        said.push(format!(
            "aborted {} to {}",
            super::output::count_s(aborted.len() as u64, "multipart upload"),
            aborted.join(", ")
        ));
    }
    for u in uploads {
        match &u.outcome {
            AbortOutcome::Failed(e) => said.push(format!(
                "could not abort the multipart upload to {}: {e} (its parts stay stored, \
                 invisible, until the bucket's lifecycle rule removes them)",
                u.url
            )),
            AbortOutcome::TimedOut => said.push(format!(
                "the store did not confirm the abort of the multipart upload to {} within {} s \
                 (its parts may stay stored until the bucket's lifecycle rule removes them)",
                u.url,
                ABORT_TIMEOUT.as_secs()
            )),
            // Aborted is said above; an upload that ended meanwhile needs no word.
            _ => {}
        }
    }
    if said.is_empty() {
        return "interrupted; nothing was staged".into();
    }
    format!("interrupted; {}", said.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upload(url: &str, outcome: AbortOutcome) -> AbortedUpload {
        AbortedUpload {
            url: url.into(),
            outcome,
        }
    }

    #[test]
    fn messages() {
        assert_eq!(message(&[], &[]), "interrupted; nothing was staged");
        assert_eq!(
            message(&[PathBuf::from(".a.pdx.x.pdx-tmp")], &[]),
            "interrupted; removed 1 staged output: .a.pdx.x.pdx-tmp"
        );
        assert_eq!(
            message(
                &[PathBuf::from(".a.pdx.x.pdx-tmp"), PathBuf::from("o/.b.y")],
                &[]
            ),
            "interrupted; removed 2 staged outputs: .a.pdx.x.pdx-tmp, o/.b.y"
        );
    }

    #[test]
    fn upload_messages() {
        assert_eq!(
            message(&[], &[upload("s3://b/big.pdx", AbortOutcome::Aborted)]),
            "interrupted; aborted 1 multipart upload to s3://b/big.pdx"
        );
        // An upload that completed meanwhile is nothing to say.
        assert_eq!(
            message(&[], &[upload("s3://b/done.pdx", AbortOutcome::Finished)]),
            "interrupted; nothing was staged"
        );
        let m = message(
            &[PathBuf::from(".t.bin.x")],
            &[
                upload("s3://b/a.pdx", AbortOutcome::Aborted),
                upload("s3://b/c.pdx", AbortOutcome::Aborted),
                upload("s3://b/slow.pdx", AbortOutcome::TimedOut),
            ],
        );
        assert_eq!(
            m,
            "interrupted; removed 1 staged output: .t.bin.x; aborted 2 multipart uploads to \
             s3://b/a.pdx, s3://b/c.pdx; the store did not confirm the abort of the multipart \
             upload to s3://b/slow.pdx within 10 s (its parts may stay stored until the \
             bucket's lifecycle rule removes them)"
        );
        let failed = upload(
            "s3://b/x.pdx",
            AbortOutcome::Failed(paramdex::Error::remote(
                "s3://b/x.pdx",
                paramdex::RemoteProblem::Denied,
                "access denied (HTTP 403 AccessDenied)",
            )),
        );
        let m = message(&[], &[failed]);
        assert!(
            m.starts_with(
                "interrupted; could not abort the multipart upload to s3://b/x.pdx: \
                 s3://b/x.pdx: access denied"
            ),
            "{m}"
        );
    }
}
