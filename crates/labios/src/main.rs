use clap::Parser;

/// Threads for blocking work: the workers' device I/O (at most a few dozen
/// calls at once: lanes times their depth) and functions. Tokio's default
/// of 512 let bursts of short calls grow the pool past 300 threads under
/// the soak, each keeping memory in its allocator (BENCHMARKS.md "Soak").
/// The system allocator is used: with it serve's memory stays flat under
/// the soak, where mimalloc 3 grew without bound and mimalloc 2 by 9 % in
/// ten minutes, and it ran the soak 25 % faster.
const BLOCKING_THREADS: usize = 64;

fn main() -> std::process::ExitCode {
    // SAFETY: called first, before any thread exists; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = labios::cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LABIOS_LOG")
                // s3s logs every S3 error it answers (a missing key, a bad
                // signature) as an error; `labios s3` logs its own failures.
                // fuser warns of every call LABIOS answers with ENOSYS on
                // purpose (the kernel then does the work itself).
                .unwrap_or_else(|_| "warn,s3s::ops=off,fuser=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("labios: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(labios::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("labios: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
