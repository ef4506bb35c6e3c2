//! The `paramdex` command-line tool.

mod cmd;

use std::process::ExitCode;

fn main() -> ExitCode {
    cmd::main()
}
