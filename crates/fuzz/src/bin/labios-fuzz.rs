//! `labios-fuzz TARGET|all [--inputs N] [--seed S] [--start I]`: runs fuzz
//! targets and prints, per target, the inputs run, the time taken, the rate
//! and the failures; `--replay FILE` runs one saved input. Exits with 1 if
//! anything failed.

use clap::Parser;
use labios_fuzz::{engine, find, Report, Target, TARGETS};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    about = "Fuzz the decoders of untrusted input of LABIOS",
    after_help = "Targets: label, frames, pipeline, functions, config, wasm, bridge, gateway \
                  (--list describes them), or all. A failure prints the seed, the input number \
                  and the input, and saves the input under the temporary directory."
)]
struct Args {
    /// A target name, or `all`.
    #[arg(required_unless_present = "list")]
    target: Option<String>,
    /// Inputs to run (default: each target's own). With `all`, a target
    /// whose inputs are costly (functions, wasm) runs N divided by its cost.
    #[arg(long)]
    inputs: Option<u64>,
    /// Seed of the generated inputs: the same seed gives the same inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Number of the first input (to replay input I: --start I --inputs 1).
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Runs this one saved input instead.
    #[arg(long, conflicts_with_all = ["inputs", "start"])]
    replay: Option<PathBuf>,
    /// Lists the targets.
    #[arg(long)]
    list: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        for t in TARGETS {
            println!("{:<9} {}", t.name, t.about);
        }
        return ExitCode::SUCCESS;
    }
    let name = args.target.as_deref().unwrap_or_default();
    let targets: Vec<&'static Target> = if name == "all" {
        TARGETS.to_vec()
    } else {
        match find(name) {
            Some(t) => vec![t],
            None => {
                eprintln!("labios-fuzz: no target {name:?} (try --list)");
                return ExitCode::from(2);
            }
        }
    };
    if let Some(file) = &args.replay {
        let input = match std::fs::read(file) {
            Ok(input) => input,
            Err(e) => {
                eprintln!("labios-fuzz: {}: {e}", file.display());
                return ExitCode::from(2);
            }
        };
        let mut failed = false;
        for t in targets {
            match engine::replay(t, input.clone()) {
                Some(fault) => {
                    println!("{}: {fault}", t.name);
                    failed = true;
                }
                None => println!("{}: ok", t.name),
            }
        }
        return if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let all = name == "all";
    let mut failed = false;
    for t in targets {
        let inputs = match args.inputs {
            Some(n) if all => (n / t.cost).max(1),
            Some(n) => n,
            None => t.default_inputs,
        };
        let report = engine::run(t, args.seed, args.start, inputs);
        print(&report);
        failed |= !report.failures.is_empty();
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn print(r: &Report) {
    println!(
        "{:<9} seed {} : {} inputs in {:.1} s ({:.0} inputs/s), {} failures, peak {:.1} MiB live",
        r.target,
        r.seed,
        r.inputs,
        r.elapsed.as_secs_f64(),
        r.inputs_per_sec(),
        r.failures.len(),
        r.peak_bytes as f64 / f64::from(1 << 20)
    );
    for f in &r.failures {
        println!(
            "  input {}: {} ({})",
            f.iteration,
            f.fault,
            f.saved.display()
        );
    }
}
