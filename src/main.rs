//! The `paramdex` command-line tool.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("paramdex: error: {e}");
            cli::exit_code_for(&e)
        }
    }
}
