//! `discern`: the command line (SPEC §1.1).

mod config;
mod demo;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use discern_engine::discern_store::{ApplyOutcome, ChangesetType};
use discern_engine::Engine;

#[global_allocator]
static ALLOC: discern_engine::alloc::Counting = discern_engine::alloc::Counting;

#[derive(Parser)]
#[command(
    name = "discern",
    version,
    about = "A search engine with exact and close matches"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the engine.
    Serve {
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        listen: Option<String>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run the engine on a temporary data dir with built-in demo data.
    Demo {
        #[arg(long)]
        listen: Option<String>,
    },
    /// Apply changeset files (plain, .gz or .zst) to a data dir, offline.
    Load {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long = "type", default_value = "delta")]
        ty: String,
        #[arg(long)]
        dimensions: Option<PathBuf>,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write a checkpoint of a data dir, offline.
    Checkpoint {
        #[arg(long)]
        data_dir: PathBuf,
    },
}

fn main() {
    discern_engine::alloc::keep_freed_memory();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("discern: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            data_dir,
            listen,
            config,
        } => {
            let settings = config::Settings::load(config.as_deref(), data_dir, listen)?;
            serve(settings, None)
        }
        Command::Demo { listen } => {
            let dir = std::env::temp_dir().join(format!("discern-demo-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let mut settings = config::Settings::load(None, Some(dir.clone()), listen)?;
            settings.engine.data_dir = dir.clone();
            let r = serve(settings, Some(demo::load));
            let _ = std::fs::remove_dir_all(&dir);
            r
        }
        Command::Load {
            data_dir,
            ty,
            dimensions,
            files,
        } => load(&data_dir, &ty, dimensions.as_deref(), &files),
        Command::Checkpoint { data_dir } => {
            let settings = config::Settings::load(None, Some(data_dir), None)?;
            let engine = Engine::open(settings.engine, false)?;
            let mut guard = engine.lock_writer_blocking();
            let meta = engine.checkpoint(&mut guard)?;
            println!("{}", meta.id);
            Ok(())
        }
    }
}

type Preload = fn(&Arc<Engine>, &str) -> anyhow::Result<()>;

fn serve(settings: config::Settings, preload: Option<Preload>) -> anyhow::Result<()> {
    let preloaded = discern_engine::image::bootstrap(&settings.engine).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "bootstrapping from the primary's image failed: the feed applies its changesets instead");
        None
    });
    let engine = Engine::open(settings.engine.clone(), true)?;
    if let Some(preloaded) = preloaded {
        engine.started_from_image(preloaded);
    }
    let _ = rayon::ThreadPoolBuilder::new()
        .start_handler(|_| discern_engine::process::thread_started())
        .build_global();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(discern_engine::process::thread_started)
        .enable_all()
        .build()?;
    // The server runs as a task on a worker, not on this thread (`block_on`'s future
    // runs on the calling thread): there the listener's every connection would wake
    // this thread to accept it and then a worker to serve it, two thread hand-offs
    // per connection; on a worker, the accepting worker serves the connection next.
    let server = rt.spawn(async move {
        let listener = tokio::net::TcpListener::bind(&settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let addr = listener.local_addr()?;
        if let Some(preload) = preload {
            let e = engine.clone();
            let base = format!("http://{addr}");
            tokio::task::spawn_blocking(move || preload(&e, &base)).await??;
        }
        let saving = engine.clone();
        let shutdown = async move {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = match signal(SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return,
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("shutting down");
            // the next start loads this instead of re-extracting every item; queries
            // are answered meanwhile, and the writer stays held until the exit so that
            // no apply can make the saved index stale (a publisher sees its changeset
            // refused, not acknowledged, and sends it again to the next process)
            let saved = tokio::task::spawn_blocking(move || {
                let mut guard = saving.lock_writer_blocking();
                if let Err(e) = saving.store().sync() {
                    tracing::warn!(error = %e, "making the item store durable failed");
                }
                let r = saving.save_index(&mut guard);
                (guard, r)
            })
            .await;
            if let Ok((guard, r)) = saved {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "saving the index failed");
                }
                // the writer is closed for good: an apply waiting for it fails with
                // its connection when the process ends
                std::mem::forget(guard);
            }
            // idle keep-alive connections must not hold the process open
            tokio::spawn(async {
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                std::process::exit(0);
            });
        };
        discern_server::serve(engine, listener, shutdown).await
    });
    rt.block_on(server)?
}

fn load(
    data_dir: &Path,
    ty: &str,
    dimensions: Option<&Path>,
    files: &[PathBuf],
) -> anyhow::Result<()> {
    let ty = ChangesetType::parse_posted(ty)?;
    let settings = config::Settings::load(None, Some(data_dir.to_path_buf()), None)?;
    let engine = Engine::open(settings.engine, false)?;
    let mut guard = engine.lock_writer_blocking();
    if let Some(d) = dimensions {
        let doc = std::fs::read(d).with_context(|| format!("reading {}", d.display()))?;
        engine.set_dimensions(&mut guard, &doc)?;
    }
    for f in files {
        let started = std::time::Instant::now();
        let file = std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let bar = indicatif::ProgressBar::new(size);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(f.display().to_string());
        let raw = bar.wrap_read(file);
        let name = f.to_string_lossy();
        let reader: Box<dyn std::io::Read + Send> = if name.ends_with(".gz") {
            Box::new(flate2::read::MultiGzDecoder::new(raw))
        } else if name.ends_with(".zst") {
            Box::new(zstd::stream::read::Decoder::new(raw)?)
        } else {
            Box::new(raw)
        };
        let outcome = engine.apply(&mut guard, ty, std::io::BufReader::new(reader));
        bar.finish_and_clear();
        match outcome {
            Ok(ApplyOutcome::Applied {
                meta,
                created,
                modified,
                deleted,
            }) => {
                let items = created + modified;
                let secs = started.elapsed().as_secs_f64().max(1e-9);
                eprintln!(
                    "{}: changeset {} applied: {created} created, {modified} modified, {deleted} deleted in {secs:.2} s ({:.0} items/s)",
                    f.display(),
                    meta.id,
                    items as f64 / secs
                );
            }
            Ok(ApplyOutcome::Empty) => {
                eprintln!("{}: empty changeset, nothing applied", f.display())
            }
            Err(e) => bail!("{}: {e}", f.display()),
        }
    }
    Ok(())
}
