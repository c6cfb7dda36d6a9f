//! The `labios` command line. Every client command reaches a running
//! `labios serve` through `--endpoint` / `LABIOS_ENDPOINT` (default: the
//! socket inside the configured data directory).

use crate::config::{Config, Deployment};
use anyhow::Context;
use bytes::Bytes;
use clap::{Parser, Subcommand};
use labios_client::Client;
use labios_connect::{connect_client, distributed_stores, parse_stack, set_worker_stack};
use labios_core::administrator::Administrator;
use labios_label::WorkerStatus;
use labios_store::remote::{connect, Endpoint};
use labios_store::FileKind;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "labios",
    version,
    about = "LABIOS: label-based distributed I/O"
)]
pub struct Cli {
    /// TOML configuration file.
    #[arg(long, global = true, env = "LABIOS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Unix socket path or HOST:PORT of `labios serve`.
    #[arg(long, global = true, env = "LABIOS_ENDPOINT")]
    pub endpoint: Option<String>,
    /// Application access key (default: the local default application).
    #[arg(long, global = true, env = "LABIOS_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// Application secret.
    #[arg(long, global = true, env = "LABIOS_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the embedded runtime and serve local clients.
    Serve {
        /// Data directory (workers, inventory, default socket).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Distributed deployment: run a label dispatcher process.
    Dispatcher,
    /// Distributed deployment: run worker INDEX of the configured pool.
    Worker {
        index: usize,
        /// Start suspended (elastic reserve): it wakes when a task arrives.
        #[arg(long)]
        suspended: bool,
    },
    /// Distributed deployment: run the worker manager (score order, dead
    /// worker detection and task re-dispatch, launch and wake-up of workers).
    Manager,
    /// Applications and their credentials (article 3.3.2a).
    #[command(subcommand)]
    App(AppCommand),
    /// Copy a local file into LABIOS.
    Put {
        local: PathBuf,
        path: String,
        /// Functions the worker applies before storing (computational
        /// storage), e.g. `zstd:level=19` or `sort:dtype=i64|lz4`; repeatable.
        #[arg(long)]
        pipeline: Vec<String>,
        /// With --pipeline: return once the data is staged; the worker
        /// finishes the pipeline and the write in the background.
        #[arg(long)]
        no_wait: bool,
    },
    /// Run a pipeline over a file where it is stored and print only the
    /// result (in-situ analytics), e.g. `--pipeline median:dtype=i64`.
    Query {
        path: String,
        #[arg(long, required = true)]
        pipeline: Vec<String>,
    },
    /// The application's own functions (WebAssembly) and the built-ins.
    #[command(subcommand)]
    Function(FunctionCommand),
    /// Copy a LABIOS file to a local file ("-" for standard output).
    Get { path: String, local: PathBuf },
    /// Stage data in or out between LABIOS (`labios:/path`), local files
    /// (plain paths) and external storage (`NAME:/path` of a mount,
    /// `s3://bucket/key` of a declared bucket).
    Cp {
        src: String,
        dst: String,
        /// Copy a directory tree.
        #[arg(short, long)]
        recursive: bool,
    },
    /// List files under a prefix.
    Ls { prefix: Option<String> },
    /// Show a file's metadata.
    Stat { path: String },
    /// Remove a file or an empty directory.
    Rm { path: String },
    /// Workers (state, tier, score, stack), queue depths and labels per
    /// second.
    Status,
    /// Application hints of a file or directory (README "Hints"): how it
    /// will be used, as `user.labios.*` extended attributes.
    #[command(subcommand)]
    Hint(HintCommand),
    /// Where a file's bytes are: `OFFSET LEN WORKER TIER HOST` per extent
    /// (README "Hints"), as `ceph osd map` tells an object's OSDs.
    Locate { path: String },
    /// Workers' I/O stacks (README "Worker I/O stacks").
    #[command(subcommand)]
    Stack(StackCommand),
    /// Run an unmodified program with its I/O under the LABIOS prefixes
    /// intercepted (LD_PRELOAD); exits with the program's status.
    Run {
        /// Writes return once published; fsync and close wait for them.
        #[arg(long = "async")]
        asynchronous: bool,
        /// Mount point of the LABIOS namespace (repeatable).
        #[arg(long = "prefix", default_value = "/labios")]
        prefixes: Vec<String>,
        /// Start the program on the host holding most of this file's bytes
        /// (through `[run] launcher`, `ssh {host}` by default), so that it
        /// reads its input where it lies.
        #[arg(long, value_name = "PATH")]
        near: Option<String>,
        /// The program and its arguments (after `--`).
        #[arg(trailing_var_arg = true, required = true)]
        program: Vec<String>,
    },
    /// Mount LABIOS as a file system (FUSE) at MOUNTPOINT, for every
    /// program (static binaries, mmap, io_uring, libaio included); runs
    /// until SIGINT, SIGTERM or `labios umount MOUNTPOINT`.
    Mount {
        mountpoint: PathBuf,
        /// Writes return once published; fsync and close wait for them.
        #[arg(long = "async")]
        asynchronous: bool,
        /// Let every user in (the kernel checks the reported permissions).
        #[arg(long)]
        allow_other: bool,
        /// Seconds the kernel trusts entries and attributes before asking
        /// again: other clients' changes show after at most this.
        #[arg(long, default_value_t = 1.0)]
        cache_timeout: f64,
    },
    /// Unmount a `labios mount`.
    Umount { mountpoint: PathBuf },
    /// Serve the LABIOS namespace over the S3 REST API: buckets are
    /// top-level directories, objects are files, credentials are those of
    /// `labios app create`.
    S3 {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: String,
    },
    /// Run the CM1-like demo workload on an embedded runtime and verify it.
    Demo {
        /// Keep data here instead of a temporary directory.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Run a benchmark scenario (dispatch, write, read, small, latency,
    /// anatomy, elastic, dispatch-scaling, sds, stacks, soak).
    Bench {
        scenario: String,
        /// Print one JSON object per run (soak: also one per second sampled).
        #[arg(long)]
        json: bool,
        /// Total bytes for write/read scenarios.
        #[arg(long)]
        bytes: Option<u64>,
        /// soak: labels to publish before stopping.
        #[arg(long, default_value_t = 10_000_000)]
        labels: u64,
        /// soak: stop after this many seconds even if fewer labels went through.
        #[arg(long)]
        seconds: Option<u64>,
        /// soak: write the plot of memory and queue depths over time (SVG) here.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Run against a throwaway distributed deployment on this machine:
        /// nats-server, redis-server, dispatcher(s) and 3 workers as processes.
        #[arg(long)]
        cluster: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum AppCommand {
    /// Register an application; prints its id, access key and secret.
    Create { name: String },
    /// List registered applications.
    Ls,
}

#[derive(Subcommand, Debug)]
pub enum StackCommand {
    /// Change the stack of running worker WORKER to SPEC (module names,
    /// comma-separated, the backend last, e.g. checksum,zstd,file): labels
    /// at its storage finish on the old stack, the next run on the new.
    /// Lasts until the worker restarts (its configuration's stack then).
    Set { worker: u32, spec: String },
}

#[derive(Subcommand, Debug)]
pub enum HintCommand {
    /// Set hint NAME (placement, replicas, replication, block_size,
    /// cache_size, tier, route) of PATH to VALUE.
    Set {
        path: String,
        name: String,
        value: String,
    },
    /// The value of hint NAME of PATH.
    Get { path: String, name: String },
    /// Every hint of PATH, one `NAME VALUE` per line.
    Ls { path: String },
    /// Remove hint NAME of PATH.
    Rm { path: String, name: String },
}

#[derive(Subcommand, Debug)]
pub enum FunctionCommand {
    /// Register MODULE (.wasm or .wat) as function NAME of this application.
    Add { name: String, module: PathBuf },
    /// This application's functions.
    Ls,
    /// Remove function NAME of this application.
    Rm { name: String },
    /// The built-in functions and what they do.
    Builtins,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut config = Config::load(cli.config.as_deref())?;
    if let Some(ep) = &cli.endpoint {
        config.endpoint = Some(ep.clone());
    }
    match cli.command {
        Command::Serve { data_dir } => {
            if let Some(d) = data_dir {
                config.data_dir = d;
            }
            crate::serve::serve(config).await
        }
        Command::Dispatcher => crate::processes::dispatcher(config).await,
        Command::Worker { index, suspended } => {
            crate::processes::worker(config, index, suspended).await
        }
        Command::Manager => crate::processes::manager(config, cli.config).await,
        Command::App(cmd) => app(&config, cmd).await,
        Command::Stack(StackCommand::Set { worker, spec }) => {
            stack_set(&config, worker, &spec).await
        }
        Command::Run {
            asynchronous,
            prefixes,
            near,
            program,
        } => {
            let options = crate::run::RunOptions {
                asynchronous,
                near,
                prefixes,
                program,
                config_file: cli.config,
                key: cli.key,
                secret: cli.secret,
            };
            let status = crate::run::run(config, options).await?;
            if !status.success() {
                use std::os::unix::process::ExitStatusExt;
                let code = status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                std::process::exit(code);
            }
            Ok(())
        }
        Command::Mount {
            mountpoint,
            asynchronous,
            allow_other,
            cache_timeout,
        } => {
            let cache_timeout = Duration::try_from_secs_f64(cache_timeout).map_err(|_| {
                anyhow::anyhow!("--cache-timeout {cache_timeout}: give seconds, 0 or more")
            })?;
            let options = crate::mount::MountOptions {
                mountpoint,
                asynchronous,
                allow_other,
                cache_timeout,
                key: cli.key,
                secret: cli.secret,
            };
            crate::mount::mount(config, options).await
        }
        Command::Umount { mountpoint } => crate::mount::umount(&mountpoint),
        Command::S3 { listen } => crate::s3::s3(config, &listen).await,
        Command::Demo { data_dir } => crate::demo::run(config, data_dir).await,
        Command::Bench {
            scenario,
            json,
            bytes,
            labels,
            seconds,
            plot,
            cluster,
        } => {
            let target = if cluster {
                crate::bench::Target::LocalCluster
            } else if cli.endpoint.is_some() || config.deployment == Deployment::Distributed {
                crate::bench::Target::Configured
            } else {
                crate::bench::Target::LocalServer
            };
            let soak = crate::bench::SoakOptions {
                labels,
                seconds,
                plot,
            };
            crate::bench::run(config, cli.config, target, &scenario, json, bytes, soak).await
        }
        Command::Put {
            local,
            path,
            pipeline,
            no_wait,
        } => {
            let client = connect_client(&config.connection(), cli.key, cli.secret).await?;
            if pipeline.is_empty() {
                put(&client, &local, &path).await
            } else {
                put_through(&client, &local, &path, &pipeline, !no_wait).await
            }
        }
        Command::Query { path, pipeline } => {
            let client = connect_client(&config.connection(), cli.key, cli.secret).await?;
            let result = client.query(&path, parse_pipeline(&pipeline)?).await?;
            let mut out = std::io::stdout().lock();
            out.write_all(&result)?;
            if std::io::IsTerminal::is_terminal(&out) && !result.ends_with(b"\n") {
                out.write_all(b"\n")?;
            }
            Ok(())
        }
        Command::Function(cmd) => function(&config, cli.key, cli.secret, cmd).await,
        Command::Get { path, local } => {
            get(
                &connect_client(&config.connection(), cli.key, cli.secret).await?,
                &path,
                &local,
            )
            .await
        }
        Command::Cp {
            src,
            dst,
            recursive,
        } => {
            crate::cp::cp(
                &connect_client(&config.connection(), cli.key, cli.secret).await?,
                &src,
                &dst,
                recursive,
            )
            .await
        }
        Command::Ls { prefix } => {
            ls(
                &connect_client(&config.connection(), cli.key, cli.secret).await?,
                prefix,
            )
            .await
        }
        Command::Stat { path } => {
            stat(
                &connect_client(&config.connection(), cli.key, cli.secret).await?,
                &path,
            )
            .await
        }
        Command::Rm { path } => Ok(connect_client(&config.connection(), cli.key, cli.secret)
            .await?
            .remove(&path)
            .await?),
        Command::Status => {
            status(&connect_client(&config.connection(), cli.key, cli.secret).await?).await
        }
        Command::Hint(cmd) => {
            hint(
                &connect_client(&config.connection(), cli.key, cli.secret).await?,
                cmd,
            )
            .await
        }
        Command::Locate { path } => {
            let client = connect_client(&config.connection(), cli.key, cli.secret).await?;
            print!(
                "{}",
                labios_client::Location::lines(&client.locate(&path).await?)
            );
            Ok(())
        }
    }
}

/// `labios hint`: hints are the attributes `user.labios.NAME`, checked
/// where every interface's are (`Client::set_xattr`).
async fn hint(client: &Client, cmd: HintCommand) -> anyhow::Result<()> {
    use labios_label::hints::PREFIX;
    match cmd {
        HintCommand::Set { path, name, value } => {
            client
                .set_xattr(
                    &path,
                    &format!("{PREFIX}{name}"),
                    Some(value.into_bytes().into()),
                )
                .await?
        }
        HintCommand::Get { path, name } => {
            let value = client
                .xattr(&path, &format!("{PREFIX}{name}"))
                .await?
                .ok_or_else(|| anyhow::anyhow!("{path} has no hint {name}"))?;
            println!("{}", String::from_utf8_lossy(&value));
        }
        HintCommand::Ls { path } => {
            for (name, value) in client.xattrs(&path).await? {
                if let Some(short) = name.strip_prefix(PREFIX) {
                    println!("{short} {}", String::from_utf8_lossy(&value));
                }
            }
        }
        HintCommand::Rm { path, name } => {
            match client.remove_xattr(&path, &format!("{PREFIX}{name}")).await {
                Err(labios_label::Error::NotFound(m))
                    if m.ends_with(labios_store::NO_ATTRIBUTE) =>
                {
                    anyhow::bail!("{path} has no hint {name}")
                }
                done => done?,
            }
        }
    }
    Ok(())
}

/// `labios stack set`.
async fn stack_set(config: &Config, worker: u32, names: &str) -> anyhow::Result<()> {
    let spec = parse_stack(names)?;
    set_worker_stack(&config.connection(), worker, &spec).await?;
    println!("worker {worker} runs {spec}");
    Ok(())
}

/// The administrator of this deployment's application registry.
async fn registry(config: &Config) -> anyhow::Result<Administrator> {
    let inventory = match config.deployment {
        Deployment::Embedded => {
            let endpoint = Endpoint::parse(&config.endpoint())?;
            connect(&endpoint, None, None).await?.0.inventory
        }
        Deployment::Distributed => distributed_stores(&config.connection()).await?.inventory,
    };
    Ok(Administrator::new(inventory))
}

async fn app(config: &Config, cmd: AppCommand) -> anyhow::Result<()> {
    let admin = registry(config).await?;
    match cmd {
        AppCommand::Create { name } => {
            let app = admin.create_app(&name).await?;
            println!("id:     {}", app.id);
            println!("name:   {}", app.name);
            println!("key:    {}", app.key);
            println!("secret: {}", app.secret);
        }
        AppCommand::Ls => {
            for a in admin.apps().await? {
                println!("{:>6} {}", a.id, a.name);
            }
        }
    }
    Ok(())
}

const CHUNK: usize = 4 << 20;

async fn ls(client: &Client, prefix: Option<String>) -> anyhow::Result<()> {
    for m in client.list(prefix.as_deref().unwrap_or("/")).await? {
        let kind = if m.kind == FileKind::Dir { 'd' } else { '-' };
        println!(
            "{kind}{:o} {:>12} {} {}",
            m.mode,
            m.size,
            fmt_time(m.mtime),
            m.path
        );
    }
    Ok(())
}

async fn stat(client: &Client, path: &str) -> anyhow::Result<()> {
    let m = client.stat(path).await?;
    println!("path:  {}", m.path);
    println!(
        "kind:  {}",
        if m.kind == FileKind::Dir {
            "directory"
        } else {
            "file"
        }
    );
    println!("size:  {}", m.size);
    println!("mode:  {:o}", m.mode);
    println!("owner: {}", m.owner);
    println!("ctime: {}", fmt_time(m.ctime));
    println!("mtime: {}", fmt_time(m.mtime));
    if labios_bridge::is_external(path) {
        println!("stored: externally (asked of the external system, not kept by LABIOS)");
    } else if m.kind == FileKind::File {
        let extents = client.catalog().extents(m.id, 0, m.size).await?;
        let mut workers: Vec<u32> = extents.iter().map(|e| e.worker).collect();
        workers.sort_unstable();
        workers.dedup();
        println!("extents: {} on workers {:?}", extents.len(), workers);
    }
    Ok(())
}

async fn put(client: &Client, local: &Path, path: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut file = std::fs::File::open(local)
        .with_context(|| format!("{}: not found or unreadable", local.display()))?;
    if file.metadata()?.is_dir() {
        anyhow::bail!("{} is a directory", local.display());
    }
    client.catalog().open_or_create(path, 0o644).await?;
    let mut offset = 0u64;
    let mut handles = Vec::new();
    loop {
        let mut buf = vec![0u8; CHUNK];
        let n = read_full(&mut file, &mut buf)?;
        if n == 0 {
            break;
        }
        buf.truncate(n);
        handles.push(
            client
                .write_at_async(path, offset, Bytes::from(buf))
                .await?,
        );
        offset += n as u64;
        if handles.len() >= 16 {
            client.wait_many(&handles).await?;
            handles.clear();
        }
    }
    client.wait_many(&handles).await?;
    client.flush(path).await?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{} -> {path}: {offset} bytes in {secs:.3} s",
        local.display()
    );
    Ok(())
}

fn parse_pipeline(specs: &[String]) -> anyhow::Result<Vec<labios_label::Operation>> {
    let mut ops = Vec::new();
    for spec in specs {
        ops.extend(labios_label::Operation::parse_pipeline(spec)?);
    }
    Ok(ops)
}

/// One label with the whole file: a pipeline transforms the data as a
/// whole (a compressed frame, a sorted array), not chunk by chunk.
async fn put_through(
    client: &Client,
    local: &Path,
    path: &str,
    pipeline: &[String],
    wait: bool,
) -> anyhow::Result<()> {
    let ops = parse_pipeline(pipeline)?;
    let started = Instant::now();
    let data = std::fs::read(local)
        .with_context(|| format!("{}: not found or unreadable", local.display()))?;
    let len = data.len();
    let handle = client
        .write_through(path, 0, Bytes::from(data), ops)
        .await?;
    let staged = started.elapsed().as_secs_f64();
    if wait {
        client.wait(&handle).await?;
        eprintln!(
            "{} -> {path}: {len} bytes staged in {staged:.3} s, stored through the pipeline in {:.3} s",
            local.display(),
            started.elapsed().as_secs_f64()
        );
    } else {
        eprintln!(
            "{} -> {path}: {len} bytes staged in {staged:.3} s; the worker finishes in the background",
            local.display()
        );
    }
    Ok(())
}

async fn function(
    config: &Config,
    key: Option<String>,
    secret: Option<String>,
    cmd: FunctionCommand,
) -> anyhow::Result<()> {
    if let FunctionCommand::Builtins = cmd {
        for (name, what) in labios_functions::builtins() {
            println!("{name:10} {what}");
        }
        return Ok(());
    }
    let client = connect_client(&config.connection(), key, secret).await?;
    match cmd {
        FunctionCommand::Add { name, module } => {
            let bytes = std::fs::read(&module)
                .with_context(|| format!("{}: not found or unreadable", module.display()))?;
            client.register_function(&name, Bytes::from(bytes)).await?;
            println!("registered {name}");
        }
        FunctionCommand::Ls => {
            for name in client.functions().await? {
                println!("{name}");
            }
        }
        FunctionCommand::Rm { name } => client.remove_function(&name).await?,
        FunctionCommand::Builtins => {}
    }
    Ok(())
}

fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

async fn get(client: &Client, path: &str, local: &Path) -> anyhow::Result<()> {
    let meta = client.stat(path).await?;
    if meta.kind == FileKind::Dir {
        anyhow::bail!("{} is a directory", meta.path);
    }
    let mut out: Box<dyn Write> = if local == Path::new("-") {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(
            std::fs::File::create(local)
                .with_context(|| format!("cannot create {}", local.display()))?,
        )
    };
    let mut offset = 0;
    while offset < meta.size {
        let data = client.read_at(path, offset, CHUNK as u64).await?;
        if data.is_empty() {
            anyhow::bail!(
                "{path}: file shrank to {offset} bytes while reading (expected {})",
                meta.size
            );
        }
        out.write_all(&data)?;
        offset += data.len() as u64;
    }
    out.flush()?;
    Ok(())
}

async fn status(client: &Client) -> anyhow::Result<()> {
    let inventory = client.catalog().inventory();
    let before = inventory.workers().await?;
    // Workers publish their counters about once per score interval (1 s
    // by default): wait until each has published again, or 3 s.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut workers = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = inventory.workers().await?;
        let all_new = now.iter().all(|a| {
            before
                .iter()
                .find(|b| b.spec.id == a.spec.id)
                .is_none_or(|b| a.heartbeat > b.heartbeat)
        });
        if all_new || Instant::now() >= deadline {
            break now;
        }
    };
    workers.sort_by_key(|w| w.spec.id);
    println!(
        "{:>3} {:<8} {:<14} {:>5} {:>6} {:>6} {:>7} {:>12} {:>12}  stack",
        "id", "tier", "state", "speed", "energy", "score", "queued", "used", "labels"
    );
    for w in &workers {
        println!(
            "{:>3} {:<8} {:<14} {:>5} {:>6} {:>6.3} {:>7} {:>12} {:>12}  {}",
            w.spec.id,
            w.spec.tier,
            format!("{:?}", w.state),
            w.spec.speed,
            w.spec.energy,
            w.score,
            w.queued,
            w.used,
            w.labels_done,
            w.stack.join(",")
        );
    }
    for w in workers.iter().filter(|w| !w.layers.is_empty()) {
        print!("{}", layer_table(w));
    }
    let stores = client.stores();
    for queue in stores.labels.queues("labels.").await? {
        println!(
            "queue {queue}: {} labels waiting",
            stores.labels.depth(&queue).await?
        );
    }
    for queue in stores.tasks.queues("worker.").await? {
        println!(
            "queue {queue}: {} tasks waiting",
            stores.tasks.depth(&queue).await?
        );
    }
    println!("labels/s: {:.0}", labels_per_second(&before, &workers));
    Ok(())
}

/// A worker's `metrics` table: each layer's calls, bytes and time, and
/// its own time (less the layer below it), top first.
fn layer_table(w: &WorkerStatus) -> String {
    let mut out = format!(
        "worker {} layers since its stack was set:\n  {:<14} {:>9} {:>9} {:>7} {:>14} {:>14} {:>10} {:>10}\n",
        w.spec.id, "layer", "writes", "reads", "others", "written", "read", "total ms", "own ms"
    );
    for (i, l) in w.layers.iter().enumerate() {
        let below = w.layers.get(i + 1).map_or(0, |b| b.nanos);
        out += &format!(
            "  {:<14} {:>9} {:>9} {:>7} {:>14} {:>14} {:>10.1} {:>10.1}\n",
            l.name,
            l.writes,
            l.reads,
            l.others,
            l.written,
            l.read,
            l.nanos as f64 / 1e6,
            l.nanos.saturating_sub(below) as f64 / 1e6
        );
    }
    out
}

/// Labels per second the workers executed between two looks at their
/// statuses, each worker over the interval between the two statuses it
/// published: counters are published about once per score interval, so
/// dividing by the caller's own wall-clock window would be off by up to
/// an interval's worth of labels.
fn labels_per_second(before: &[WorkerStatus], after: &[WorkerStatus]) -> f64 {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.spec.id == a.spec.id)?;
            let nanos = a.heartbeat.checked_sub(b.heartbeat).filter(|&n| n > 0)?;
            Some(a.labels_done.saturating_sub(b.labels_done) as f64 * 1e9 / nanos as f64)
        })
        // Not `sum()`: the sum of no f64 is -0.0, which prints as "-0".
        .fold(0.0, |total, rate| total + rate)
}

fn fmt_time(nanos: u64) -> String {
    let secs = nanos / 1_000_000_000;
    let (d, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(d as i64);
    format!(
        "{y:04}-{m:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a (year, month, day) date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use labios_label::{LayerStats, WorkerSpec};

    #[test]
    fn layer_table_gives_each_layers_own_time() {
        let layer = |name: &str, written: u64, nanos: u64| LayerStats {
            name: name.into(),
            writes: 2,
            written,
            nanos,
            ..LayerStats::default()
        };
        let w = WorkerStatus {
            layers: vec![
                layer("checksum", 8192, 9_000_000),
                layer("file", 4096, 6_500_000),
            ],
            ..status(3, 0, 0)
        };
        let rows: Vec<Vec<String>> = layer_table(&w)
            .lines()
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect();
        assert_eq!(
            rows[0].join(" "),
            "worker 3 layers since its stack was set:"
        );
        assert_eq!(
            rows[2],
            ["checksum", "2", "0", "0", "8192", "0", "9.0", "2.5"]
        );
        assert_eq!(rows[3], ["file", "2", "0", "0", "4096", "0", "6.5", "6.5"]);
    }

    fn status(id: u32, labels_done: u64, heartbeat: u64) -> WorkerStatus {
        WorkerStatus {
            labels_done,
            heartbeat,
            ..WorkerStatus::new(WorkerSpec {
                id,
                tier: "t".into(),
                speed: 1,
                energy: 1,
                capacity: 1,
                max_queue: 1,
                functions: false,
            })
        }
    }

    /// The rate is each worker's own over the interval between its two
    /// publications, not over the window the command happened to wait.
    #[test]
    fn labels_per_second_counts_over_each_workers_publications() {
        let s = 1_000_000_000;
        let before = [
            status(0, 100, 10 * s),
            status(1, 0, 10 * s),
            status(2, 5, 9 * s),
        ];
        let after = [
            status(0, 300, 12 * s),
            status(1, 50, 10 * s + s / 2),
            // Not published again: no figure, not a zero.
            status(2, 5, 9 * s),
            // New since the first look: no interval yet.
            status(3, 1000, 12 * s),
        ];
        let rate = labels_per_second(&before, &after);
        assert!((rate - 200.0).abs() < 1e-6, "{rate}");
        let idle = labels_per_second(&before, &before);
        assert_eq!(format!("{idle:.0}"), "0");
    }
}
